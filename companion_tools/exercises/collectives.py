"""Chapter 3's exercise checker: an all-reduce of your own, run on 2, 3 and 4 processes.

``check_allreduce_algorithm(fn)`` launches ``fn(tensor)`` (the signature of the
chapter's ``allreduce_naive``: sum across ranks, in place) on every rank, for
tensors of 1, 7 and 100,003 floats holding small integers, whose sums are exact
in any order: every rank must end with the sum, bit for bit (exercise 4). It also
prints what the busiest rank sent for the largest tensor, counted with chapter 9's
ledger (``dist.send`` and the ``isend`` of ``batch_isend_irecv``, which the
chapter's ``sendrecv`` uses, and any collective): compare them with your
``m(p)`` and ``v(p)``. ``fn`` must be importable by the worker processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from companion.collectives import allreduce_naive
from companion.runtime import launch
from companion.runtime.launcher import _check_function
from companion.sharding.ledger import count_bytes

from .verdicts import Verdicts

__all__ = ["check_allreduce_algorithm", "allreduce_worker"]

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
        ranks = launch(allreduce_worker, n, fn, backend="gloo", timeout=120)
        wrong = sorted(
            {r for r, seen in enumerate(ranks) for numel in NUMELS if not seen[numel][0]}
        )
        verdicts.add(
            f"{n} processes, {', '.join(f'{m:,}' for m in NUMELS)} floats, every rank "
            "holds the sum",
            not wrong,
            f"wrong on rank(s) {wrong}",
        )
        busiest = max(ranks, key=lambda seen: seen[NUMELS[-1]][2])[NUMELS[-1]]
        verdicts.note(
            f"{n} processes, {NUMELS[-1]:,} floats: the busiest rank sent "
            f"{busiest[1]} message(s), {busiest[2]:,} bytes"
            + (f"; collectives: {', '.join(busiest[3])}" if busiest[3] else "")
        )
    return verdicts
