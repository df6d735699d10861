"""The ranks finish the tree: the same sum, bit for bit, on every rank count.

Used in: chapter 11.

Each rank has added up the nodes inside its block of pieces
(:func:`~companion.samebits.tree.nodes_within`). Two ways finish the sum:

* :func:`gather_nodes`, the simple one, for any number of ranks and pieces:
  every rank gathers every rank's node sums and adds the rest of the tree
  itself. Each rank receives ``N - 1`` times its share: more bytes than an
  all-reduce, ``(N - 1) k`` vectors instead of ``2 (N - 1) / N``.
* :func:`halving_doubling`, when the ranks hold equal blocks that are nodes of
  a complete tree (``N`` and the piece count powers of two): the tree's top
  levels are the rounds of a recursive halving. In round ``d`` rank ``r`` and
  rank ``r XOR d`` swap halves of what they still hold and each adds the half
  it received to the half it kept (addition commutes: the same bits); after ``log2 N`` rounds each rank holds a
  ``1/N`` slice of the root, and the same rounds backwards gather the slices.
  A rank sends ``2 (N - 1) / N`` vectors: an all-reduce's bytes, in
  ``2 log2 N`` messages instead of a ring's ``2 (N - 1)``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..collectives.allreduce import sendrecv
from ..core.compat import all_gather_single
from .tree import Node, nodes_within, rank_pieces, tree_sum

__all__ = ["gather_nodes", "halving_doubling", "fits_halving", "finish_tree"]


def gather_nodes(mine: list[torch.Tensor], pieces: int, zero: torch.Tensor) -> torch.Tensor:
    """The root's sum from every rank's node sums ``mine`` (one gather, padded to the most);
    ``zero`` is a vector of the sums' size, type and device (a rank may hold no piece)."""
    world_size = dist.get_world_size()
    blocks = [nodes_within(*rank_pieces(pieces, r, world_size), pieces) for r in range(world_size)]
    most = max(len(b) for b in blocks)
    sent = zero.expand(most, -1).clone()
    for i, value in enumerate(mine):
        sent[i] = value
    got = sent.new_empty(world_size * most * zero.numel())
    all_gather_single(got, sent.view(-1))
    got = got.view(world_size * most, zero.numel())
    known: dict[Node, torch.Tensor] = {}
    for r, block in enumerate(blocks):
        known.update(zip(block, got[r * most : r * most + len(block)]))
    return tree_sum((0, pieces), known.get)


def fits_halving(pieces: int, world_size: int) -> bool:
    """Whether every rank's block is one node of a complete tree over the ranks."""
    power = lambda n: n & (n - 1) == 0  # noqa: E731
    return power(world_size) and power(pieces) and pieces >= world_size


def halving_doubling(mine: torch.Tensor) -> torch.Tensor:
    """The root's sum from this rank's one node sum ``mine``, in place (``N`` a power of two)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    lo, hi, kept, d = 0, mine.numel(), [], 1
    while d < world_size:  # reduce-scatter: the tree's levels above the ranks
        mid, lower = (lo + hi) // 2, rank & d == 0
        keep, give = ((lo, mid), (mid, hi)) if lower else ((mid, hi), (lo, mid))
        theirs = torch.empty(keep[1] - keep[0], dtype=mine.dtype, device=mine.device)
        sendrecv(mine[give[0] : give[1]], rank ^ d, theirs, rank ^ d)
        ours = mine[keep[0] : keep[1]]
        ours.add_(theirs)  # addition commutes: both partners get the same bits
        kept.append((lo, hi))
        lo, hi = keep
        d *= 2
    while kept:  # all-gather: the same rounds backwards
        d //= 2
        whole, lower = kept.pop(), rank & d == 0
        other = (hi, whole[1]) if lower else (whole[0], lo)
        sendrecv(mine[lo:hi], rank ^ d, mine[other[0] : other[1]], rank ^ d)
        lo, hi = whole
    return mine


def finish_tree(
    mine: list[torch.Tensor], pieces: int, zero: torch.Tensor, exchange: str
) -> torch.Tensor:
    """The root's sum on every rank: ``"halving"`` where it fits, else ``"gather"``."""
    if dist.get_world_size() == 1:
        return mine[0]
    if exchange == "halving" and fits_halving(pieces, dist.get_world_size()):
        return halving_doubling(mine[0])
    return gather_nodes(mine, pieces, zero)
