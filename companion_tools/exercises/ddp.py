"""Chapter 5's exercise checker: a sampler of your own, the way ``DistributedSampler`` shares.

``check_sampler(fn)`` calls ``fn(n, rank, world_size, epoch) -> indices`` (rank
``rank``'s sample indices for one epoch of a dataset of ``n`` samples) for every
rank of 2, 3 and 4 ranks, datasets of 10, 11 and 101 samples and epochs 0 and 1.
Each case passes when every rank gets as many indices as the others (a rank with
one batch more waits forever in DDP's all-reduce), every sample is read each
epoch, no sample twice beyond the ``world_size - 1`` that padding to equal
lengths may repeat, the same call gives the same indices (every rank must compute
the same split without talking to the others), and the order changes from one
epoch to the next (exercise 3: a different seed on each rank fails here).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable

from companion.ddp import sampler_indices

from .verdicts import Verdicts, attempt

__all__ = ["check_sampler", "torch_sampler"]

SIZES, WORLD_SIZES = (10, 11, 101), (2, 3, 4)


def torch_sampler(n: int, rank: int, world_size: int, epoch: int) -> list[int]:
    """``DistributedSampler``'s indices for ``rank`` (the chapter's ``sampler_indices``)."""
    return sampler_indices(range(n), world_size, epoch)[rank]


def _index(i) -> int | None:
    """``i`` as a Python int if it is an integer of any kind (a tensor's, numpy's), else None."""
    try:
        return operator.index(i)
    except TypeError:
        return None


def _shares(fn: Callable, n: int, world_size: int, epoch: int) -> list[list]:
    """Each rank's indices (a list, tensor or array of integers), as Python ints where they are."""
    return [
        [_index(i) if _index(i) is not None else i for i in fn(n, rank, world_size, epoch)]
        for rank in range(world_size)
    ]


def _problem(fn: Callable, n: int, world_size: int) -> str:
    """What is wrong with ``fn``'s shares of ``n`` samples on ``world_size`` ranks."""
    epochs = [_shares(fn, n, world_size, epoch) for epoch in (0, 1)]
    for epoch, shares in enumerate(epochs):
        if any(not all(isinstance(i, int) and 0 <= i < n for i in s) for s in shares):  # ints
            return f"epoch {epoch}: an index is not an integer in [0, {n})"
        if len({len(s) for s in shares}) > 1:
            return f"epoch {epoch}: the ranks get {[len(s) for s in shares]} indices, not equal"
        seen = Counter(i for s in shares for i in s)
        if len(seen) < n:
            return f"epoch {epoch}: {n - len(seen)} sample(s) never read"
        if sum(seen.values()) - n > world_size - 1:
            return f"epoch {epoch}: {sum(seen.values()) - n} samples read twice, more than padding"
    if _shares(fn, n, world_size, 0) != epochs[0]:
        return "a second call gave other indices: the split must not depend on when it is made"
    if n > 20 and sorted(map(tuple, epochs[0])) == sorted(map(tuple, epochs[1])):
        return "epoch 1 reads the samples in epoch 0's order: reshuffle every epoch"
    return ""


def check_sampler(fn: Callable = torch_sampler, quiet: bool = False) -> Verdicts:
    """Your ``fn(n, rank, world_size, epoch)`` on 2, 3 and 4 ranks, two epochs each."""
    verdicts = Verdicts(
        f"{getattr(fn, '__name__', 'fn')}(n, rank, world_size, epoch): equal "
        "shares, every sample once an epoch (up to padding), reshuffled",
        quiet,
    )
    for world_size in WORLD_SIZES:
        problem = ""
        for n in SIZES:
            found, raised = attempt(_problem, fn, n, world_size)
            if raised or found:
                problem = f"{n} samples, {raised or found}"
                break
        verdicts.add(
            f"{world_size} ranks, datasets of {', '.join(map(str, SIZES))} samples",
            not problem,
            problem,
        )
    return verdicts
