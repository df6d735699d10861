"""PowerSGD by hand: each gradient matrix sent as two thin factors, with error feedback.

Used in: chapter 10.

PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019, arXiv 1905.13727)
sends, for an ``n x m`` gradient matrix ``M``, a rank-``r`` approximation
``P Q^T`` built by one step of power iteration, where the sum over ranks
happens on the factors, since ``sum_i M_i Q = (sum_i M_i) Q``:

1. ``P = M Q`` with a shared ``Q`` (``m x r``); all-reduce ``P``;
2. orthonormalise ``P`` (its scale does not matter);
3. ``Q = M^T P``; all-reduce ``Q`` and divide by N: ``Q = mean(M)^T P``;
4. the averaged gradient is approximated by ``P Q^T``.

That sends ``r (n + m)`` values instead of ``n m``. **Warm start** keeps
``Q`` for the next step, so the power iteration goes on across steps.
**Error feedback** keeps what was not sent, ``M - P Q^T``, on each rank and
adds it to the next step's gradient: nothing is lost, only delayed.
Vectors (biases) and matrices that would not shrink by
``min_compression_rate`` are averaged as they are.

The paper orthonormalises with Gram-Schmidt, and so does torch's
``powerSGD_hook``; here it is a QR factorisation, which stays orthonormal
when ``P`` has fewer independent columns than ``r`` (a gradient of a batch
of 11 samples has rank at most 11): so at full rank the hook returns the
plain average up to rounding (``tests/slowlinks/test_powersgd.py``).
"""

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..core.checks import check_int
from .hooks import _done, check_bucket, mean_hook

__all__ = ["PowerSGDState", "powersgd_hook", "orthonormal", "compressed_size"]


@dataclass
class PowerSGDState:
    """What :func:`powersgd_hook` keeps between steps, on each rank."""

    rank: int = 1
    error_feedback: bool = True
    warm_start: bool = True
    min_compression_rate: float = 2.0
    seed: int = 0
    start_iter: int = 2  # steps averaged whole before compressing (torch's start_powerSGD_iter)
    step: int = 0  # the steps done (each one's last bucket counts it)
    errors: dict = field(default_factory=dict)  # bucket index: what this rank did not send
    qs: dict = field(default_factory=dict)  # (bucket index, matrix): Q, the same on every rank

    def __post_init__(self):
        check_int(self.rank, "rank", 1, "the rank of the approximation: 1, 2, 4, ...")
        check_int(self.start_iter, "start_iter", 1, "DDP regroups its buckets after step 1")
        if isinstance(self.min_compression_rate, bool) or not self.min_compression_rate >= 0:
            raise ValueError(f"min_compression_rate must be >= 0, got {self.min_compression_rate}")


def orthonormal(A: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning at least the columns of ``A`` (a reduced QR's Q)."""
    return torch.linalg.qr(A, mode="reduced").Q


def _sum_together(tensors: list[torch.Tensor]) -> None:
    """All-reduce several tensors in one message: packed, summed, unpacked in place."""
    if not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    for t, piece in zip(tensors, flat.split([t.numel() for t in tensors])):
        t.copy_(piece.view_as(t))


def _compressible(g: torch.Tensor, state: PowerSGDState) -> bool:
    if g.dim() < 2:
        return False
    n, m = g.shape[0], math.prod(g.shape[1:])
    r = min(state.rank, n, m)
    return r >= 1 and state.min_compression_rate * r * (n + m) < n * m


def _start_q(state: PowerSGDState, key: tuple[int, int], M: torch.Tensor) -> torch.Tensor:
    """Last step's Q (warm start) or a random one from a seed every rank shares (a new one
    each step: the same Q every step would keep projecting onto the same directions)."""
    r = min(state.rank, *M.shape)
    if state.warm_start and key in state.qs and state.qs[key].shape == (M.shape[1], r):
        return orthonormal(state.qs[key])
    seed = (state.seed * 1_000_003 + state.step) * 1_000_003 + key[0] * 1009 + key[1]
    g = torch.Generator().manual_seed(seed % 2**63)
    return orthonormal(torch.randn(M.shape[1], r, generator=g, dtype=M.dtype).to(M.device))


def powersgd_hook(
    state: PowerSGDState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: the bucket's matrices averaged through rank-r factors.

    The first ``state.start_iter`` steps average the whole bucket (as torch's
    hook does for ``start_powerSGD_iter`` steps): DDP regroups its buckets
    after the first step (in the order the gradients arrived), and what is
    kept per bucket must not outlive that.
    """
    buffer, index = check_bucket(bucket), bucket.index()
    this_step = state.step + 1  # counted from 1
    if bucket.is_last():
        state.step += 1
    if this_step <= state.start_iter:
        return mean_hook(None, bucket)
    if state.error_feedback:
        buffer.add_(state.errors.get(index, torch.zeros_like(buffer)))
        local = buffer.clone()
    grads = bucket.gradients()  # views into the buffer: writing them writes the buffer
    matrices = [g.view(g.shape[0], -1) for g in grads if _compressible(g, state)]
    plain = [g for g in grads if not _compressible(g, state)]
    _sum_together(plain)  # vectors and small matrices: sent whole
    for g in plain:
        g.div_(dist.get_world_size())
    qs = [_start_q(state, (index, j), M) for j, M in enumerate(matrices)]
    ps = [M @ Q for M, Q in zip(matrices, qs)]
    _sum_together(ps)  # sum_i M_i Q
    ps = [orthonormal(P) for P in ps]
    qs = [M.T @ P for M, P in zip(matrices, ps)]
    _sum_together(qs)
    for M, P, Q in zip(matrices, ps, qs):
        Q.div_(dist.get_world_size())  # Q = mean(M)^T P
        M.copy_(P @ Q.T)  # the average, approximated
    if state.warm_start:
        state.qs.update({(index, j): Q for j, Q in enumerate(qs)})
    if state.error_feedback:  # what was not sent, sent later (for a tensor sent whole, this
        state.errors[index] = local - buffer  # rank's gap to the mean: the next sum cancels it)
    return _done(buffer)


def compressed_size(shapes: list[torch.Size], rank: int, min_compression_rate: float = 2.0) -> int:
    """Values one step sends for tensors of these ``shapes`` (before the ring's factor)."""
    state = PowerSGDState(rank, min_compression_rate=min_compression_rate)
    total = 0
    for shape in shapes:
        g = torch.empty(shape, device="meta")
        if _compressible(g, state):
            n, m = shape[0], math.prod(shape[1:])
            total += min(rank, n, m) * (n + m)
        else:
            total += g.numel()
    return total
