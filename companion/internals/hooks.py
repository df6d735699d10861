"""Step 2 of DDP from scratch: one gradient hook per parameter, all-reduce started at once.

Used in: chapter 6.

Backward computes the gradients from the last layer to the first. The
gradient of the last layer is final long before backward reaches the first
one, so its all-reduce can run while backward goes on: communication
*overlaps* computation. ``Tensor.register_post_accumulate_grad_hook`` calls a
function as soon as a parameter's ``.grad`` is complete for this backward
pass (for a tied parameter, used twice, after both uses: once). The hook
(registered by :class:`~companion.internals.naive.NaiveDDP`, which calls
``_reduce``) scales the gradient and launches an asynchronous all-reduce
(``async_op=True`` returns a handle at once); :meth:`~companion.internals.naive.NaiveDDP.finish`, at the
end of backward, waits for all of them before the optimizer may step.

Every rank must launch its all-reduces in the same order (a collective
matches the same call on each rank). Here that order is the order in which
backward finishes the gradients, which is the same on every rank for the
same model and graph. A parameter that ``forward`` did not use gets no
gradient and no all-reduce: the step never completes, and the next forward
pass raises :class:`~companion.ddp.unused.UnusedParameters` naming it
(:class:`~companion.internals.buckets.BucketedDDP` can handle it instead).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .naive import NaiveDDP, sample_weight, unused_error

__all__ = ["HookedDDP", "unused_error"]


class HookedDDP(NaiveDDP):
    """One asynchronous all-reduce per parameter, launched by its gradient hook."""

    def _prepare(self) -> None:
        self._scale = sample_weight(self)  # 1 / world size, or a share
        self._works = []

    def _reduce(self, name: str, p: torch.Tensor) -> None:
        if p.grad is None:
            raise RuntimeError(
                f"{type(self).__name__}: backward brought {name} an undefined gradient "
                f"(autograd's UndefinedGrad), so there is nothing to all-reduce; use "
                f"BucketedDDP(..., find_unused_parameters=True), which leaves it None as "
                f"torch's DDP does"
            )
        p.grad.mul_(self._scale)
        work = dist.all_reduce(p.grad, async_op=True)  # returns at once
        self._works.append(work)
        self.allreduces += 1

    def _average(self) -> None:
        """Wait for every all-reduce (the gradients are then averaged in place)."""
        self._wait_started()

    def _wait_started(self) -> None:
        for work in getattr(self, "_works", []):
            work.wait()
        self._works = []
