"""Step 3 of DDP from scratch: gradients packed into buckets, one all-reduce per bucket.

Used in: chapter 6.

One all-reduce per parameter pays the latency ``alpha`` of chapter 3's cost
model once per tensor. Buckets pay it once per bucket:

* :func:`assign_buckets` groups the parameters in *reverse* registration
  order (about the order backward finishes them) into buckets of about
  ``bucket_cap_mb`` MiB, closing a bucket once it reaches the cap, as
  torch's DDP does;
* each bucket owns one flat buffer; a gradient hook copies (and scales) its
  gradient into the bucket's slice, and when the last slot of a bucket is
  filled the bucket's one asynchronous all-reduce starts;
* buckets start in index order on every rank (a bucket that is complete
  early waits for the ones before it), so the collectives match;
* :meth:`BucketedDDP.finish` waits for them and copies the averages back
  into ``.grad``. (Torch's ``gradient_as_bucket_view=True`` makes ``.grad`` a
  view into the bucket and saves both copies.)

Parameters that need care: frozen ones are never in a bucket; a tied
parameter is one parameter, in one bucket, counted once. A parameter that
``forward`` did not use would leave its bucket incomplete forever. By default
:meth:`~BucketedDDP.finish` raises an error naming it; with
``find_unused_parameters=True`` it is handled as torch's DDP does: its slot
holds zeros, so every rank still launches every bucket, a one-flag-per-parameter
all-reduce finds the parameters that *no* rank used, and those keep
``.grad = None``. (Torch finds them right after forward, by walking the
autograd graph; here they are found after backward, so their bucket does not
overlap with backward.)
"""

from __future__ import annotations

from functools import partial
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_positive
from ..runtime.agree import check_ranks_agree
from .hooks import unused_error
from .naive import NaiveDDP, sample_weight, trainable_parameters

__all__ = ["assign_buckets", "Bucket", "BucketedDDP", "fill_unused"]


def assign_buckets(params: Sequence[torch.Tensor], bucket_cap_mb: float) -> list[list[int]]:
    """Indices of ``params`` grouped into buckets, last parameter first.

    Torch's rule: a parameter joins the open bucket, and the bucket closes as
    soon as it holds ``bucket_cap_mb`` MiB or more, so a bucket exceeds the
    cap by at most its last parameter (a parameter larger than the cap closes
    the bucket it joins). A parameter of another dtype or device than the
    open bucket's starts a new one: a flat buffer has one of each.
    """
    check_positive(bucket_cap_mb, "bucket_cap_mb", "give the bucket size in MiB, e.g. 25")
    cap, buckets, size, open_ = bucket_cap_mb * 2**20, [], 0, False
    for i in reversed(range(len(params))):
        p = params[i]
        last = params[buckets[-1][-1]] if buckets else None
        if not open_ or (p.dtype, p.device) != (last.dtype, last.device):
            buckets.append([])
            size, open_ = 0, True
        buckets[-1].append(i)
        size += p.numel() * p.element_size()
        open_ = size < cap
    return buckets


class Bucket:
    """One flat buffer holding the gradients of some parameters, and its all-reduce."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]):
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        numel = sum(p.numel() for p in self.params)
        self.buffer = torch.zeros(numel, dtype=self.params[0].dtype, device=self.params[0].device)
        self.slots = list(self.buffer.split([p.numel() for p in self.params]))
        self.ready: set[str] = set()
        self.work = None

    @property
    def complete(self) -> bool:
        return len(self.ready) == len(self.names)


class BucketedDDP(NaiveDDP):
    """Gradients copied into buckets; one async all-reduce per complete bucket."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0, *, weigh_by_samples=False,
                 find_unused_parameters=False, finish_in_backward=True):
        super().__init__(module, weigh_by_samples, finish_in_backward)
        named = _check_trainable(trainable_parameters(module))
        groups = assign_buckets([p for _, p in named], bucket_cap_mb)
        self.buckets = [Bucket([named[i] for i in group]) for group in groups]
        self.find_unused_parameters = bool(find_unused_parameters)
        check_ranks_agree(module, dict(bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused_parameters), "BucketedDDP")
        self._scale, self._next = 1.0, 0
        for b in self.buckets:
            for name, p, slot in zip(b.names, b.params, b.slots):
                p.register_post_accumulate_grad_hook(partial(self._hook, b, name, slot))

    def _prepare(self) -> None:
        self._scale, self._next = sample_weight(self), 0
        for b in self.buckets:
            b.ready, b.work = set(), None

    def _hook(self, bucket: Bucket, name: str, slot: torch.Tensor, p: torch.Tensor) -> None:
        if not self._sync:  # inside no_sync(): the gradient stays local
            return
        torch.mul(p.grad.reshape(-1), self._scale, out=slot)  # copy in, scaled
        bucket.ready.add(name)
        self._launch_ready()

    def _launch_ready(self) -> None:
        """Start every complete bucket whose predecessors have all started."""
        while self._next < len(self.buckets) and self.buckets[self._next].complete:
            b = self.buckets[self._next]
            b.work = dist.all_reduce(b.buffer, async_op=True)
            self._next += 1
            self.allreduces += 1

    def finish(self) -> None:
        """Fill in unused parameters (or raise), wait, and copy the averages to ``.grad``."""
        if not self._pending:
            return
        self._pending, self._samples = False, 0
        used = fill_unused(self)  # every bucket has started now
        for b in self.buckets:
            b.work.wait()
            for name, p, slot in zip(b.names, b.params, b.slots):
                if p.grad is not None:
                    p.grad.copy_(slot.view_as(p))
                elif used[name]:  # no rank used it: .grad stays None
                    p.grad = slot.view_as(p).clone()


def fill_unused(net: BucketedDDP) -> dict[str, bool]:
    """At the end of backward: zeros for each parameter without a gradient, or an error.

    Without ``find_unused_parameters`` a missing gradient raises (after
    waiting for the buckets already started, so no collective is left half
    done). With it, the parameter's slot holds zeros, the remaining buckets
    start, and one small all-reduce of one flag per parameter tells which
    parameters *no* rank used. Returns ``{name: used by some rank}``.
    """
    missing = [(b, n) for b in net.buckets for n in b.names if n not in b.ready]
    names = [n for b in net.buckets for n in b.names]
    if missing and not net.find_unused_parameters:
        for b in net.buckets[: net._next]:
            b.work.wait()
        raise unused_error([n for _, n in missing], "BucketedDDP")
    for b, name in missing:
        b.slots[b.names.index(name)].zero_()  # no gradient here: zeros in the sum
        b.ready.add(name)
    net._launch_ready()
    if not net.find_unused_parameters:
        return dict.fromkeys(names, True)
    unused_here = {n for _, n in missing}
    flags = torch.tensor([0.0 if n in unused_here else 1.0 for n in names],
                         device=net.buckets[0].buffer.device)
    dist.all_reduce(flags)
    return {n: bool(f > 0) for n, f in zip(names, flags.tolist())}


def _check_trainable(named: list) -> list:
    if not named:
        raise ValueError("the module has no trainable parameters: nothing to all-reduce")
    return named
