"""Step 2 of DDP from scratch: one gradient hook per parameter, all-reduce started at once.

Used in: chapter 6.

Backward computes the gradients from the last layer to the first. The
gradient of the last layer is final long before backward reaches the first
one, so its all-reduce can run while backward goes on: communication
*overlaps* computation. ``Tensor.register_post_accumulate_grad_hook`` calls a
function as soon as a parameter's ``.grad`` is complete for this backward
pass (for a tied parameter, used twice, after both uses: once). The hook
scales the gradient and launches an asynchronous all-reduce
(``async_op=True`` returns a handle at once); :meth:`HookedDDP.finish`, at the
end of backward, waits for all of them before the optimizer may step.

Every rank must launch its all-reduces in the same order (a collective
matches the same call on each rank). Here that order is the order in which
backward finishes the gradients, which is the same on every rank for the
same model and graph. A parameter that ``forward`` did not use gets no
gradient and no all-reduce: :meth:`HookedDDP.finish` raises
:class:`~companion.ddp.unused.UnusedParameters` naming it
(:class:`~companion.internals.buckets.BucketedDDP` can handle it instead).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
from torch import nn

from ..ddp.unused import UnusedParameters
from .naive import NaiveDDP, sample_weight, trainable_parameters

__all__ = ["HookedDDP", "unused_error"]


class HookedDDP(NaiveDDP):
    """One asynchronous all-reduce per parameter, launched by its gradient hook."""

    def __init__(
        self, module: nn.Module, weigh_by_samples: bool = False, finish_in_backward: bool = True
    ):
        super().__init__(module, weigh_by_samples, finish_in_backward)
        self._params = trainable_parameters(module)
        self._scale, self._works, self._ready = 1.0, [], set()
        for name, p in self._params:
            p.register_post_accumulate_grad_hook(partial(self._hook, name))

    def _prepare(self) -> None:
        self._scale = sample_weight(self)  # 1 / world size, or this rank's share of samples
        self._works, self._ready = [], set()

    def _hook(self, name: str, p: torch.Tensor) -> None:
        if not self._sync:  # inside no_sync(): the gradient stays local
            return
        p.grad.mul_(self._scale)
        work = dist.all_reduce(p.grad, async_op=True)  # returns at once
        self._works.append(work)
        self._ready.add(name)
        self.allreduces += 1

    def finish(self) -> None:
        """Wait for every all-reduce (the gradients are then averaged in place)."""
        if not self._pending:
            return
        self._pending = False
        for work in self._works:
            work.wait()
        self._samples = 0
        missing = [name for name, _ in self._params if name not in self._ready]
        if missing:
            raise unused_error(missing, "HookedDDP")


def unused_error(names: list[str], wrapper: str) -> UnusedParameters:
    """The error for parameters that got no gradient, saying what to do."""
    return UnusedParameters(
        f"{wrapper}: parameter(s) {', '.join(names)} got no gradient in this backward "
        f"pass (forward did not use them), so their all-reduce never started. Freeze "
        f"them (p.requires_grad_(False)), remove them, or use "
        f"BucketedDDP(..., find_unused_parameters=True)"
    )
