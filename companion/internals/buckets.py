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
* ``finish()`` waits for them and copies the averages back into ``.grad``.
  (Torch's ``gradient_as_bucket_view=True`` makes ``.grad`` a view into the
  bucket and saves both copies.)

Parameters that need care: frozen ones are never in a bucket; a tied
parameter is one parameter, in one bucket, counted once. A parameter that
``forward`` did not use would leave its bucket incomplete forever: by
default the next forward pass raises an error naming it. With
``find_unused_parameters=True`` it is handled as torch's DDP does. After
each forward pass, :func:`~companion.internals.lifetime.reachable_parameters`
walks the autograd graph back from the outputs; at the first gradient of
backward, :func:`fill_unused` marks every parameter it did not reach as
ready, its slot holding the gradient it already has (accumulated under
``no_sync()``) or zeros, so every rank still launches every bucket, during
backward. At the end a one-flag-per-parameter all-reduce
(:func:`used_anywhere`) finds the parameters that *no* rank used since the
last synchronised step, and those keep the ``.grad`` they had.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable

from ..core.checks import check_positive
from ..runtime.agree import check_ranks_agree
from .hooks import HookedDDP
from .lifetime import reachable_parameters
from .naive import sample_weight

__all__ = ["assign_buckets", "Bucket", "BucketedDDP", "fill_unused", "used_anywhere"]


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
    """One flat buffer holding the gradients of some parameters, all-reduced as one."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]):
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        numel = sum(p.numel() for p in self.params)
        self.buffer = torch.zeros(numel, dtype=self.params[0].dtype, device=self.params[0].device)
        self.slots = list(self.buffer.split([p.numel() for p in self.params]))
        self.reset()

    def reset(self) -> None:
        """A new step: no slot ready."""
        self.ready: set[str] = set()

    @property
    def complete(self) -> bool:
        return len(self.ready) == len(self.names)


class BucketedDDP(HookedDDP):
    """Gradients copied into buckets; one async all-reduce per complete bucket."""

    def __init__(
        self, module: nn.Module, bucket_cap_mb=25.0, *, find_unused_parameters=False, **options
    ):  # options: NaiveDDP's weigh_by_samples and finish_in_backward
        super().__init__(module, **options)
        groups = assign_buckets([p for _, p in self._params], bucket_cap_mb)
        self.buckets = [Bucket([self._params[i] for i in g]) for g in groups]
        self.find_unused_parameters = _check_agree(module, bucket_cap_mb, find_unused_parameters)
        self._slots = {n: (b, s) for b in self.buckets for n, s in zip(b.names, b.slots)}
        if self.find_unused_parameters:  # as torch: walk the graph from the outputs
            self.register_forward_hook(note_reachable)

    def _prepare(self) -> None:
        self._scale, self._next, self._works = sample_weight(self), 0, []
        for b in self.buckets:
            b.reset()
        if self.find_unused_parameters:
            fill_unused(self)  # now: their buckets can start during backward

    def finish(self) -> None:
        if self.find_unused_parameters and self._pending and self._ready:
            fill_unused(self, self._missing())  # reached from the outputs, yet unused
        super().finish()

    def _reduce(self, name: str, p: torch.Tensor) -> None:
        bucket, slot = self._slots[name]
        _copy_scaled(p.grad, self._scale, slot)  # into the bucket
        bucket.ready.add(name)
        self._launch_ready()

    def _launch_ready(self) -> None:
        """Start every complete bucket whose predecessors have all started."""
        for b in self.buckets[self._next :]:  # in index order, on every rank
            if not b.complete:
                return
            self._works.append(dist.all_reduce(b.buffer, async_op=True))
            self._next, self.allreduces = self._next + 1, self.allreduces + 1

    def _average(self) -> None:
        """Wait, and copy the averages into ``.grad`` of every parameter some rank used."""
        used = used_anywhere(self)
        self._wait_started()
        for b in self.buckets:
            for name, p, slot in zip(b.names, b.params, b.slots):
                if used[name]:  # unused by every rank: keeps its .grad
                    _set_grad(p, slot.view_as(p))


def _check_agree(module: nn.Module, bucket_cap_mb: float, find_unused_parameters) -> bool:
    options = dict(bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused_parameters)
    check_ranks_agree(module, options, "BucketedDDP")
    return bool(find_unused_parameters)


def note_reachable(net: BucketedDDP, args, out) -> None:
    """Forward hook: note the parameters that backward can reach from ``out``."""
    if net._pending:
        net._reachable |= reachable_parameters(out)


def fill_unused(net: BucketedDDP, missing: Sequence[str] | None = None) -> None:
    """Mark ready each parameter that backward cannot reach from forward's outputs.

    Its slot holds the gradient it already has, accumulated under
    ``no_sync()``, or zeros, so every rank still launches every bucket and
    the sum is right wherever the parameter was used. As torch's DDP, the
    step then ends with this backward pass: ``finish()`` fills the ``missing``
    ones the same way, parameters that the outputs reach but that got no
    gradient (an output the loss left out).
    """
    if missing is None and net._drop_in and not net._queued:
        net._queued = True
        Variable._execution_engine.queue_callback(net.finish)
    for b in net.buckets:
        for name, p, slot in zip(b.names, b.params, b.slots):
            if (id(p) not in net._reachable) if missing is None else (name in missing):
                _copy_scaled(p.grad, net._scale, slot)
                b.ready.add(name)
                net._filled.add(name)  # ready, with no gradient of this pass
    net._launch_ready()


def used_anywhere(net: BucketedDDP) -> dict[str, bool]:
    """``{name: some rank gave it a gradient since the last synchronised step}``.

    Without ``find_unused_parameters`` every parameter was (the step is
    complete). With it, one all-reduce of one flag per parameter.
    """
    names = [n for b in net.buckets for n in b.names]
    if not net.find_unused_parameters:
        return dict.fromkeys(names, True)
    here = (net._ready - net._undefined) | net._used  # an undefined gradient is none
    device = net.buckets[0].buffer.device
    flags = torch.tensor([float(n in here) for n in names], device=device)
    dist.all_reduce(flags)
    return {n: bool(f > 0) for n, f in zip(names, flags.tolist())}


def _copy_scaled(grad: torch.Tensor | None, scale: float, slot: torch.Tensor) -> None:
    """``slot = grad * scale``, flattened; zeros for no gradient, dense for a sparse one."""
    if grad is None:
        slot.zero_()
        return
    grad = grad.detach()  # a gradient built with create_graph=True
    torch.mul((grad.to_dense() if grad.is_sparse else grad).reshape(-1), scale, out=slot)


def _set_grad(p: torch.Tensor, averaged: torch.Tensor) -> None:
    """Write ``averaged`` into ``p.grad``, keeping its layout (new if it has none)."""
    if p.grad is None:
        p.grad = averaged.clone()
    elif p.grad.is_sparse:  # as sparse as torch's (an embedding's rows: 1 sparse dim)
        p.grad = averaged.to_sparse(sparse_dim=p.grad.sparse_dim())
    else:
        with torch.no_grad():
            p.grad.copy_(averaged)
