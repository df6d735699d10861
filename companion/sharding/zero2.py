"""ZeRO stage 2: gradients sharded too, reduce-scattered bucket by bucket during backward.

Used in: chapter 9.

ZeRO-1 still holds the whole gradient (``4 * psi`` bytes) until the step.
ZeRO-2 keeps only its shard of it. The parameters are grouped into chapter
6's buckets (:func:`~companion.internals.buckets.assign_buckets`, last
layer first); each bucket is a flat, padded buffer (:class:`~.flat.FlatShards`)
and each rank owns one shard of every bucket. A gradient hook adds a
finished ``.grad`` (divided by ``N``) into its bucket's gradient buffer and
drops ``.grad``; when the bucket is complete, an asynchronous
``reduce_scatter_single`` starts, as chapter 6's all-reduce did, so it
overlaps with the rest of backward. The bucket's buffer is freed once the
reduce-scatter is done: what stays is the shard, ``4 * psi / N`` bytes.

``optimizer.step()`` finishes what backward left: a bucket with a parameter
that forward did not use is launched with zeros in its place (on every rank,
in bucket order), then each rank steps its pieces of the parameters that got
a gradient somewhere and all-gathers its shards, as in ZeRO-1. Same bytes as
DDP, a reduce-scatter plus an all-gather, and ZeRO-1's flags.

Gradient accumulation as with torch's DDP: while the model's
``require_backward_grad_sync`` is false (the attribute torch DDP's ``no_sync()``
sets, and that nanoGPT sets by hand on the micro-steps but the last), the hooks
add each gradient into its bucket and launch nothing; the backward that syncs
adds its own and reduce-scatters the sums, and ``step()`` sends whatever is
still accumulated. Between those micro-steps the whole
gradient is held, as FSDP2's ``set_requires_gradient_sync(False)`` holds it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from ..core.compat import all_gather_single, reduce_scatter_single
from ..internals.buckets import assign_buckets
from ..internals.naive import broadcast_state
from .flat import FlatShards
from .zero1 import ShardedOptimizer

__all__ = ["GradBucket", "Zero2"]


class GradBucket:
    """One bucket: its parameters' flat layout, a gradient buffer while backward fills it."""

    def __init__(self, params: list[nn.Parameter], world_size: int, rank: int):
        self.layout = FlatShards(params, world_size, rank)
        self.flat = self.layout.flatten([p.detach() for p in params])
        for p, view in zip(params, self.layout.views(self.flat)):
            p.data = view
        self.grad: torch.Tensor | None = None  # exists from the first hook to the launch
        self.ready: set[int] = set()
        self.pending: list[tuple[Any, torch.Tensor]] = []  # (work, shard of the sum)

    def slot(self, i: int) -> torch.Tensor:
        if self.grad is None:
            self.grad = self.layout.empty()
        return self.layout.views(self.grad)[i]

    def reduced(self) -> torch.Tensor:
        """This rank's shard of the summed gradients reduced so far (zeros if none)."""
        total = None
        for work, out in self.pending:
            work.wait()
            total = out if total is None else total.add_(out)
        self.pending = []
        if total is None:
            total = torch.zeros(
                self.layout.shard_numel, dtype=self.layout.dtype, device=self.layout.device
            )
        return total

    def launch(self) -> None:
        """Start the reduce-scatter of this bucket (zeros where no gradient came)."""
        grad = self.grad if self.grad is not None else self.layout.empty()
        out = torch.empty(self.layout.shard_numel, dtype=grad.dtype, device=grad.device)
        work = reduce_scatter_single(out, grad, async_op=True)
        self.pending.append((work, out))
        self.grad, self.ready = None, set()  # the buffer lives on in the work only


class Zero2(ShardedOptimizer):
    """ZeRO-2 by hand: ``Zero2(net, torch.optim.Adam, bucket_cap_mb=25, lr=1e-3)``."""

    def __init__(
        self, net: nn.Module, optimizer_class: type, bucket_cap_mb: float = 25.0, **defaults: Any
    ):
        layout = {"bucket_cap_mb": bucket_cap_mb}  # every rank must bucket alike
        super().__init__(net, optimizer_class, "Zero2", layout, **defaults)
        broadcast_state(net)
        params = [p for _, p in self.named]
        groups = assign_buckets(params, bucket_cap_mb)
        self.buckets = [
            GradBucket([params[i] for i in group], self.world_size, self.rank) for group in groups
        ]
        self._next = 0
        for bucket in self.buckets:
            for i, p in enumerate(bucket.layout.params):
                p.register_post_accumulate_grad_hook(partial(self._hook, bucket, i))
        self._make_inner(
            [b.layout for b in self.buckets], [b.layout.shard(b.flat) for b in self.buckets]
        )

    @torch.no_grad()
    def _hook(self, bucket: GradBucket, i: int, p: nn.Parameter) -> None:
        bucket.slot(i).add_(p.grad, alpha=1.0 / self.world_size)  # adds up until launched
        p.grad = None  # the whole gradient is not kept
        self._got.add(self._index[id(p)])
        if self._syncing():  # else accumulate: the buckets wait for a step that syncs
            bucket.ready.add(i)
            self._launch_ready(flush=False)

    def _launch_ready(self, flush: bool) -> None:
        """Launch buckets in index order: complete ones, or (``flush``) all that are left."""
        while self._next < len(self.buckets):
            b = self.buckets[self._next]
            if not flush and len(b.ready) < len(b.layout.params):
                return
            b.launch()
            self._next += 1
        self._next = 0  # a round is over: the next backward starts again at bucket 0

    def _reduce(self) -> list[torch.Tensor]:
        started = any(b.pending for b in self.buckets)
        left = any(b.ready or b.grad is not None for b in self.buckets)  # accumulated, too
        if self._next or left or not started:
            self._launch_ready(flush=True)  # unused parameters: zeros, same order everywhere
        return [b.reduced() for b in self.buckets]

    @torch.no_grad()
    def step(self, closure=None, **kwargs: Any) -> Any:
        loss = self._closure(closure)  # torch's contract: evaluate, then step
        self._step_pieces(self.reduced_grads(), self._got, **kwargs)
        self._whole_again()
        return loss

    def _whole_again(self) -> None:
        for b in self.buckets:
            all_gather_single(b.flat, b.layout.shard(b.flat).clone())

    def _discard_reduced(self) -> None:
        for b in self.buckets:
            b.reduced()  # waited for, and dropped
            b.grad, b.ready = None, set()
        self._next = 0
