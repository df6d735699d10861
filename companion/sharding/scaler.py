"""fp16's loss scaler when no rank holds the whole gradient.

Used in: chapter 9.

fp16 has a small range: small gradients underflow to zero. A loss scaler
multiplies the loss by ``S`` before backward (every gradient is ``S`` times
larger), divides the gradients by ``S`` before the step, and skips any step
whose gradient holds an inf or a NaN (``S`` was too large: halve it; after
``growth_interval`` good steps, double it). ``torch.amp.GradScaler`` looks for
the inf in the gradients each rank holds. Under DDP every rank holds the
same whole gradient, so every rank finds the same answer. Under ZeRO-2,
ZeRO-3 and FSDP2 each rank holds a different shard, and an overflow in one
rank's shard is invisible to the others: that rank would skip the step and
the others would take it, and the replicas would part. :class:`ShardedScaler`
therefore all-reduces one found-inf flag (its maximum) before deciding, as
torch's ``ShardedGradScaler`` does. The shards it checks and unscales are a
hand-written stage's reduced gradient shards, or each parameter's local gradient
(FSDP2's ``DTensor`` shards, DDP's whole gradients).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..core.checks import check_instance, check_int, check_positive
from ..core.precision import MathMode

__all__ = ["ShardedScaler", "gradient_shards", "check_precision"]


def gradient_shards(optimizer: Any) -> list[torch.Tensor]:
    """The gradient this rank holds for ``optimizer``'s step: a stage's reduced shards,
    else each parameter's local gradient (views: scaling them scales the gradient)."""
    check_instance(optimizer, "optimizer", torch.optim.Optimizer, "pass the optimizer that steps")
    if hasattr(optimizer, "reduced_grads"):
        return optimizer.reduced_grads()
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
    return [g.to_local() if isinstance(g, DTensor) else g for g in grads if g is not None]


class ShardedScaler:
    """``torch.amp.GradScaler``'s ``scale``, ``step`` and ``update``, with the found-inf
    flag agreed by every rank of ``group``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        group: Any = None,
    ):
        check_positive(init_scale, "init_scale")
        check_positive(growth_factor, "growth_factor")
        if not 0 < check_positive(backoff_factor, "backoff_factor") < 1:
            raise ValueError(f"backoff_factor must lie in (0, 1), got {backoff_factor!r}")
        check_int(growth_interval, "growth_interval", 1)
        self.scale_factor, self.growth, self.backoff = (
            float(init_scale),
            growth_factor,
            backoff_factor,
        )
        self.interval, self.group, self.good, self.skipped = growth_interval, group, 0, 0
        self.found_inf: bool | None = None  # this step's verdict, until update()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_factor

    def get_scale(self) -> float:
        return self.scale_factor

    @torch.no_grad()
    def step(self, optimizer: Any, *args, **kwargs) -> Any:
        """Unscale and step, unless some rank's shard holds an inf or a NaN: then skip."""
        shards = gradient_shards(optimizer)
        flag = torch.zeros((), device=shards[0].device if shards else "cpu")
        for shard in shards:
            flag = torch.maximum(flag, (~torch.isfinite(shard)).any().float())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)  # any rank's overflow
        self.found_inf = bool(flag)
        if self.found_inf:
            self.skipped += 1
            return None
        for shard in shards:
            shard.mul_(1.0 / self.scale_factor)
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        """Halve the scale after a skipped step; double it after ``growth_interval`` good ones."""
        if self.found_inf is None:
            raise RuntimeError("ShardedScaler.update() needs a step() first")
        self.good = 0 if self.found_inf else self.good + 1
        if self.found_inf:
            self.scale_factor *= self.backoff
        elif self.good == self.interval:
            self.scale_factor, self.good = self.scale_factor * self.growth, 0
        self.found_inf = None


def check_precision(mode: MathMode | None, name: str) -> MathMode | None:
    """``mode``, a :class:`MathMode` or ``None`` (fp32). Every method trains in fp32, bf16
    and fp16; fp16's loss scaler must agree on overflows across ranks
    (:class:`ShardedScaler`, which ``train_sharded`` uses)."""
    if mode is not None:
        check_instance(mode, "mode", MathMode, "pass MathMode(precision, device), or None for fp32")
    return mode
