"""One order of summation over the pieces of a global batch, whatever the number of ranks.

Used in: chapter 11.

A step's global batch is cut into *pieces* of a fixed number of samples (the
last piece of the epoch's last batch may be shorter). Piece ``i`` holds the
same samples on 1, 2 or 4 ranks: the piece, not the rank, is the unit. Their
gradients are added along one binary tree over the piece index. A node covers
the pieces ``[lo, hi)``; its left child covers the largest power of two of
them that is less than ``hi - lo``, its right child the rest. The tree
depends on the number of pieces only, so every rank count adds the same
numbers in the same order.

Rank ``r`` of ``N`` holds the contiguous pieces :func:`rank_pieces` gives it.
It adds up, on its own, every node that lies inside its block
(:func:`nodes_within`); the ranks then exchange those sums and finish the
tree (:mod:`companion.samebits.exchange`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

from ..core.batches import check_batch_size
from ..core.checks import check_int, check_not_empty
from ..core.data import ImageSet

__all__ = ["Node", "children", "nodes_within", "tree_sum", "rank_pieces", "PieceLoader"]

Node = tuple[int, int]  # the pieces [lo, hi) a node of the tree covers


def children(node: Node) -> tuple[Node, Node]:
    """The two halves of ``node``: the largest power of two below its size, then the rest."""
    lo, hi = node
    left = 1 << ((hi - lo - 1).bit_length() - 1)
    return (lo, lo + left), (lo + left, hi)


def nodes_within(lo: int, hi: int, pieces: int) -> list[Node]:
    """The largest nodes of the tree over ``pieces`` that lie inside ``[lo, hi)``, in order."""
    found, todo = [], [(0, pieces)] if lo < hi else []
    while todo:
        node = todo.pop()
        if lo <= node[0] and node[1] <= hi:
            found.append(node)
        elif node[0] < hi and lo < node[1]:  # it overlaps the block: look inside
            todo.extend(reversed(children(node)))
    return found


def tree_sum(node: Node, value: Callable[[Node], torch.Tensor | None]) -> torch.Tensor:
    """The sum over ``node`` along the tree; ``value(n)`` gives a node's sum where it is
    known (a piece's gradient, another rank's node), else ``None`` to add its children."""
    known = value(node)
    if known is not None:
        return known
    left, right = children(node)
    return tree_sum(left, value) + tree_sum(right, value)


def rank_pieces(pieces: int, rank: int, world_size: int) -> Node:
    """The contiguous pieces ``[lo, hi)`` rank ``rank`` of ``world_size`` computes."""
    return pieces * rank // world_size, pieces * (rank + 1) // world_size


class Layout(NamedTuple):
    """Where a step's pieces lie: what every rank knows of the global batch."""

    samples: int  # in the global batch
    pieces: int  # of the global batch
    block: Node  # the pieces this rank holds


class PieceLoader:
    """This rank's block of each global batch, in an order that depends on no rank count.

    Each epoch is one permutation of the training set (``seed + epoch``),
    cut into global batches of ``global_batch`` samples, each cut into pieces
    of ``piece``; rank ``r`` reads its block of pieces (possibly none). The
    layout of the batch just yielded is :attr:`layout`. ``set_epoch`` starts
    an epoch's order, ``skip`` leaves out the first batches of the next pass
    (a resume).
    """

    def __init__(self, dataset: ImageSet, global_batch: int, piece: int, device, seed: int = 0):
        _check_loader(dataset, global_batch, piece)
        self.X, self.y = dataset.tensors(device)
        self.global_batch, self.piece, self.seed = global_batch, piece, seed
        self.epoch, self.skip, self.layout = 0, 0, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.y) // self.global_batch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, world_size = _rank_and_size()
        seeded = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.y), generator=seeded)
        first, self.skip = self.skip * self.global_batch, 0
        for start in range(first, len(order), self.global_batch):
            batch = order[start : start + self.global_batch]
            pieces = -(-len(batch) // self.piece)
            lo, hi = rank_pieces(pieces, rank, world_size)
            self.layout = Layout(len(batch), pieces, (lo, hi))
            idx = batch[lo * self.piece : hi * self.piece].to(self.X.device)
            yield self.X[idx], self.y[idx]


def _rank_and_size() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _check_loader(dataset, global_batch: int, piece: int) -> None:
    check_not_empty(dataset, "dataset", "give a data set with samples")
    check_batch_size(global_batch, "global_batch")
    check_int(piece, "piece", 1, "samples per piece, e.g. 8")
    if global_batch % piece:
        raise ValueError(
            f"global_batch {global_batch} is not a whole number of pieces of {piece}: "
            f"pick a piece that divides it (e.g. {_divisor(global_batch)})"
        )


def _divisor(n: int) -> int:
    return max(d for d in (1, 2, 4, 8, 16) if n % d == 0)
