"""A ``DistributedSampler`` that can start in the middle of an epoch, for any world size.

Used in: chapter 8.

``DistributedSampler`` shuffles the data set with ``seed + epoch`` (the same
permutation on every rank), pads it to a multiple of the world size ``p`` and
deals it out: rank ``r`` takes positions ``r, r + p, r + 2p, ...``. With a
per-rank batch ``b``, global step ``k`` therefore reads positions
``k*b*p .. (k+1)*b*p - 1`` of the permutation: one contiguous block of the
global batch ``G = b*p``, whatever ``p`` is. So a run resumed at position
``s`` (the samples already consumed in this epoch) only has to skip the first
``s`` positions and deal the rest, and it may do so with another world size:
the next global batches hold the same samples, only split differently. That
is how :mod:`companion.elastic.trainer` resumes a snapshot after the world
size changed (a node left, say), as long as ``G`` stays a multiple of ``p``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import torch
from torch.utils.data.distributed import DistributedSampler

from ..core.checks import check_int

__all__ = ["ResumableSampler", "global_batches"]


class ResumableSampler(DistributedSampler):
    """A shuffling ``DistributedSampler`` whose epoch may start at global position ``start``.

    ``set_epoch(epoch, start)``: this rank's share of positions ``start, start
    + 1, ...`` of the padded permutation. With ``start=0`` it yields exactly
    what ``DistributedSampler(dataset, num_replicas, rank, seed=seed)`` does.
    """

    def __init__(self, dataset: Sized, num_replicas: int, rank: int, seed: int = 0):
        super().__init__(dataset, num_replicas, rank, shuffle=True, seed=seed)
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        check_int(start, "start", 0)
        if start > self.total_size:
            raise ValueError(
                f"start {start} is past the end of the epoch ({self.total_size} "
                f"positions); a snapshot's position must come from this data set"
            )
        super().set_epoch(epoch)
        self.start = start

    def padded_order(self) -> list[int]:
        """The epoch's permutation, padded as ``DistributedSampler`` pads it."""
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.dataset), generator=g).tolist()
        padding = self.total_size - len(order)
        order += (order * math.ceil(padding / len(order)))[:padding]
        return order

    def __iter__(self) -> Iterator[int]:
        rest = self.padded_order()[self.start :]
        return iter(rest[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return len(range(self.rank, self.total_size - self.start, self.num_replicas))


def _check_split(global_batch: int, world_size: int) -> int:
    check_int(world_size, "world_size")
    check_int(global_batch, "global_batch", 1, "the samples of one step over all ranks")
    if global_batch % world_size:
        raise ValueError(f"global batch {global_batch} is not a multiple of {world_size} ranks")
    return global_batch // world_size


def global_batches(
    dataset: Sized, world_size: int, global_batch: int, epoch: int, start: int = 0, seed: int = 0
) -> list[list[int]]:
    """The samples of each global step from position ``start``: every rank's batch, joined.

    Computed without a process group, as each of ``world_size`` ranks reads
    them with a per-rank batch ``global_batch // world_size``; each global
    batch is sorted, since only the set of samples matters to the mean
    gradient.
    """
    per_rank = _check_split(global_batch, world_size)
    shares = []
    for rank in range(world_size):
        sampler = ResumableSampler(dataset, world_size, rank, seed)
        sampler.set_epoch(epoch, start)
        shares.append(list(sampler))
    steps = math.ceil(len(shares[0]) / per_rank)
    return [
        sorted(i for share in shares for i in share[k * per_rank : (k + 1) * per_rank])
        for k in range(steps)
    ]
