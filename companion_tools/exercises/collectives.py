"""Chapter 3's exercise checkers: an all-reduce and a gradient averaging of your own.

``check_allreduce_algorithm(fn)`` launches ``fn(tensor)`` (the signature of the
chapter's ``allreduce_naive``: sum across ranks, in place) on every rank, for
tensors of 1, 7 and 100,003 floats holding small integers, whose sums are exact
in any order: every rank must end with the sum, bit for bit (exercise 4). It also
prints what the busiest rank sent for the largest tensor, counted with chapter 9's
ledger (``dist.send`` and the ``isend`` of ``batch_isend_irecv``, which the
chapter's ``sendrecv`` uses, and any collective): compare them with your
``m(p)`` and ``v(p)``.

``check_average_gradients(fn)`` launches ``fn(net)`` (the signature of the
chapter's ``average_gradients``) on 2, 3 and 4 processes, with LeNet's gradients
set to small integers that differ by rank: every rank must end with their mean
(exercise 2). It prints the collective calls and the point-to-point messages rank
0 made, by kind, and the bytes it sent: one all-reduce of everything, flattened,
against one per parameter tensor.

``fn`` must be importable by the worker processes (a file next to the notebook).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from companion.collectives import allreduce_naive, average_gradients
from companion.core import get_model, number_of
from companion.runtime import launch
from companion.runtime.launcher import _check_function
from companion.sharding.ledger import count_bytes

from .verdicts import Verdicts, attempt

__all__ = [
    "check_allreduce_algorithm",
    "allreduce_worker",
    "check_average_gradients",
    "averaging_worker",
]

NUMELS = (1, 7, 100_003)


def allreduce_worker(rank: int, world_size: int, fn: Callable) -> dict[int, tuple]:
    """Worker: ``{numel: (exact sum here, messages sent, bytes sent, collectives)}``."""
    out = {}
    for numel in NUMELS:
        g = torch.Generator().manual_seed(numel)
        values = torch.randint(-1000, 1000, (world_size, numel), generator=g).float()
        tensor = values[rank].clone()
        with count_bytes() as ledger:
            fn(tensor)
        sends = [b for kind, b in ledger.calls if kind == "send"]
        others = sorted(kind for kind, _ in ledger.calls if kind != "send")
        out[numel] = (torch.equal(tensor, values.sum(0)), len(sends), sum(sends), others)
    return out


def check_allreduce_algorithm(
    fn: Callable = allreduce_naive, world_sizes: Sequence[int] = (2, 3, 4), quiet: bool = False
) -> Verdicts:
    """Your all-reduce ``fn(tensor)`` on each world size: the exact sum on every rank."""
    _check_function(fn)
    name = getattr(fn, "__name__", "fn")
    verdicts = Verdicts(f"{name} against the exact sum of small integers on every rank", quiet)
    for n in world_sizes:
        ranks, problem = attempt(launch, allreduce_worker, n, fn, backend="gloo", timeout=120)
        wrong = (
            []
            if problem
            else sorted(
                {r for r, seen in enumerate(ranks) for numel in NUMELS if not seen[numel][0]}
            )
        )
        verdicts.add(
            f"{n} processes, {', '.join(f'{m:,}' for m in NUMELS)} floats, every rank "
            "holds the sum",
            not problem and not wrong,
            problem or f"wrong on rank(s) {wrong}: the sum must be written into the tensor",
        )
        if problem:
            continue
        busiest = max(ranks, key=lambda seen: seen[NUMELS[-1]][2])[NUMELS[-1]]
        verdicts.note(
            f"{n} processes, {NUMELS[-1]:,} floats: the busiest rank sent "
            f"{busiest[1]} message(s), {busiest[2]:,} bytes"
            + (f"; collectives: {', '.join(busiest[3])}" if busiest[3] else "")
        )
    return verdicts


def _integer_grads(net, rank: int) -> list[torch.Tensor]:
    return [
        torch.randint(
            -1000, 1000, p.shape, generator=torch.Generator().manual_seed(100 * rank + i)
        ).double()
        for i, p in enumerate(net.parameters())
    ]


def averaging_worker(rank: int, world_size: int, fn: Callable) -> tuple[bool, dict, float]:
    """Worker: ``(every gradient the mean here, calls by kind, bytes sent)`` for ``fn(net)``."""
    torch.manual_seed(0)
    net = get_model("lenet").double()
    for p, grad in zip(net.parameters(), _integer_grads(net, rank)):
        p.grad = grad
    everyone = [_integer_grads(net, r) for r in range(world_size)]
    expected = [sum(grads) / world_size for grads in zip(*everyone)]
    with count_bytes() as ledger:
        fn(net)
    same = all(
        p.grad is not None and torch.allclose(p.grad, e, rtol=1e-12, atol=1e-9)
        for p, e in zip(net.parameters(), expected)
    )
    return same, ledger.counts(), ledger.sent()


def check_average_gradients(
    fn: Callable = average_gradients, world_sizes: Sequence[int] = (2, 3, 4), quiet: bool = False
) -> Verdicts:
    """Your ``fn(net)`` on each world size: every rank's gradients their mean over the ranks."""
    _check_function(fn)
    name = getattr(fn, "__name__", "fn")
    verdicts = Verdicts(f"{name}(net) on LeNet's gradients (small integers, float64)", quiet)
    for n in world_sizes:
        ranks, problem = attempt(launch, averaging_worker, n, fn, backend="gloo", timeout=120)
        wrong = [] if problem else [r for r, (same, _, _) in enumerate(ranks) if not same]
        verdicts.add(
            f"{n} processes, every rank holds the mean gradient",
            not problem and not wrong,
            problem or f"wrong on rank(s) {wrong}: each .grad must end as the mean, in place",
        )
        if problem:
            continue
        _, calls, sent = ranks[0]
        made = ", ".join(number_of(count, kind) for kind, count in sorted(calls.items()))
        verdicts.note(f"{n} processes: rank 0 made {made or 'no call'}; sent {sent:,.0f} bytes")
    return verdicts
