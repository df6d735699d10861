"""ZeRO stage 1: the optimizer state sharded; parameters and gradients stay whole.

Used in: chapter 9.

With data parallelism every rank holds the same Adam moments for every
parameter: ``8 * psi`` bytes (fp32 ``exp_avg`` and ``exp_avg_sq``) copied
``N`` times. ZeRO-1 keeps them once, spread over the ranks. The trainable
parameters become views into one flat buffer (:class:`~.flat.FlatShards`);
rank ``r`` builds its optimizer (SGD with momentum, Adam, ...) over *its
shard only*, so its state is ``1/N`` of the whole. One step:

1. after ``loss.backward()`` every rank holds its full local gradient, as in DDP;
2. ``reduce_scatter_single`` averages the gradients *and* hands each rank
   only its shard of the average: the first half of a ring all-reduce, the
   half that rank ``r`` needs;
3. each rank steps its own shard (its state, its slice of the parameters);
4. ``all_gather_single`` sends every updated shard to every rank: the
   second half of the all-reduce. The parameters are whole again.

So ZeRO-1 sends the same bytes as DDP's all-reduce. It is a drop-in
optimizer: ``loss.backward(); optimizer.step(); optimizer.zero_grad()``.
Every rank counts equally in the average (``1/N``), as in torch's DDP; with
uneven local batches, weigh each rank's loss by its share of the samples.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..core.compat import all_gather_single, reduce_scatter_single
from ..core.checks import check_instance, check_module
from ..core.precision import MathMode
from ..internals.naive import broadcast_state, trainable_parameters
from ..runtime.agree import check_ranks_agree
from .flat import FlatShards, check_sharding_group

__all__ = ["ShardedOptimizer", "Zero1", "check_precision"]


def check_precision(mode: MathMode | None, name: str) -> MathMode | None:
    """``mode`` if the stage can train in it: fp32 or bf16 autocast (fp16's loss scaler
    unscales whole gradients, which the sharded stages never hold)."""
    if mode is not None:
        check_instance(mode, "mode", MathMode, "pass MathMode(precision, device), or None for fp32")
    if mode is not None and mode.precision == "fp16":
        raise ValueError(
            f"{name}: precision 'fp16' needs a loss scaler over whole gradients; "
            f"use precision='bf16' or 'fp32' with the sharded stages"
        )
    return mode


class ShardedOptimizer:
    """What the three stages share: an optimizer over this rank's shard, behind the
    usual ``step()`` / ``zero_grad()`` / ``param_groups``. ``layout`` holds a stage's
    own settings (Zero2's bucket cap, Zero3's prefetch), which every rank must share."""

    def __init__(
        self, net: nn.Module, optimizer_class: type, name: str, layout: dict | None = None,
        **defaults: Any,
    ):
        check_module(net, "net")
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError(
                f"{name}: optimizer_class must be a torch.optim.Optimizer class such as "
                f"torch.optim.Adam, got {optimizer_class!r}"
            )
        self.rank, self.world_size = check_sharding_group(name)
        self.net, self.optimizer_class, self.defaults = net, optimizer_class, defaults
        self.named = trainable_parameters(net)
        if not self.named:
            raise ValueError(f"{name}: the model has no trainable parameters: nothing to shard")
        settings = {"optimizer": optimizer_class.__name__, **(layout or {}), **defaults}
        check_ranks_agree(net, settings, name)  # the same layout and settings on every rank

    def _make_inner(self, shards: list[torch.Tensor]) -> None:
        """The real optimizer, over this rank's shards (leaf tensors sharing their storage)."""
        self.shard_params = [nn.Parameter(s, requires_grad=True) for s in shards]
        self.inner = self.optimizer_class(self.shard_params, **self.defaults)

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups  # a learning-rate schedule changes them here

    @property
    def state(self):
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in [*self.net.parameters(), *self.shard_params]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class Zero1(ShardedOptimizer):
    """ZeRO-1 by hand: ``Zero1(net, torch.optim.Adam, lr=1e-3)``, then use it as the optimizer."""

    def __init__(self, net: nn.Module, optimizer_class: type, **defaults: Any):
        super().__init__(net, optimizer_class, "Zero1", **defaults)
        broadcast_state(net)  # every replica starts from rank 0's parameters and buffers
        params = [p for _, p in self.named]
        self.layout = FlatShards(params, self.world_size, self.rank)
        self.flat = self.layout.flatten([p.detach() for p in params])
        for p, view in zip(params, self.layout.views(self.flat)):
            p.data = view  # the parameters now live in the flat buffer
        self._make_inner([self.layout.shard(self.flat)])

    @torch.no_grad()
    def step(self) -> None:
        grad = self.layout.flat_grad().div_(self.world_size)  # zeros for unused ones
        shard = self.shard_params[0]
        shard.grad = torch.empty_like(shard)
        reduce_scatter_single(shard.grad, grad)  # average, keep my shard
        del grad
        self.inner.step()  # my shard of the parameters, my shard of the state
        shard.grad = None
        all_gather_single(self.flat, shard.detach().clone())  # whole again
