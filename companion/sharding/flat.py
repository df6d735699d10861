"""Flat shards: many parameters laid end to end in one buffer, cut into equal pieces.

Used in: chapter 9.

Every stage of ZeRO starts from the same picture. The trainable parameters
of a model (or of one unit of it) are laid end to end in one flat vector of
``numel`` numbers. With ``N`` ranks, rank ``r`` owns the slice
``[r * shard, (r + 1) * shard)``, where ``shard = ceil(numel / N)``: when
``numel`` does not divide by ``N`` the vector is padded with zeros at the
end, so every shard has the same length (the collectives
``reduce_scatter_single`` and ``all_gather_single`` need equal pieces).
The padding is never trained: its gradient is always zero.

:class:`FlatShards` holds that layout for a list of parameters: where each
one sits in the flat vector (:meth:`~FlatShards.views`), this rank's slice
of it and each parameter's part of that slice (:meth:`~FlatShards.pieces`),
and the flat gradient with zeros where a parameter got none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..core.checks import check_int, check_module
from ..runtime.group import check_group

__all__ = ["padded_size", "FlatShards", "default_units", "check_sharding_group"]


def padded_size(numel: int, world_size: int) -> int:
    """``numel`` rounded up to a multiple of ``world_size`` (every shard equally long)."""
    check_int(numel, "numel", 0)
    check_int(world_size, "world_size", 1)
    return math.ceil(numel / world_size) * world_size


class FlatShards:
    """The flat layout of ``params`` over ``world_size`` ranks, seen from ``rank``."""

    def __init__(self, params: Sequence[nn.Parameter], world_size: int, rank: int):
        _check_layout(params, world_size, rank)
        self.params = list(params)
        self.shapes = [p.shape for p in self.params]
        self.sizes = [p.numel() for p in self.params]
        self.world_size, self.rank, self.numel = world_size, rank, sum(self.sizes)
        self.padded = padded_size(self.numel, world_size)
        self.shard_numel = self.padded // world_size
        self.lo = rank * self.shard_numel  # where this rank's shard starts
        self.dtype, self.device = self.params[0].dtype, self.params[0].device

    def empty(self) -> torch.Tensor:
        """A new flat, padded vector of this layout (zeros)."""
        return torch.zeros(self.padded, dtype=self.dtype, device=self.device)

    def flatten(self, tensors: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """``tensors`` (one per parameter; ``None`` counts as zeros) as one padded vector."""
        flat = self.empty()
        for piece, t in zip(self.views(flat), tensors):
            if t is not None:
                piece.copy_(t)
        return flat

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each parameter's place in ``flat``, shaped like the parameter (views, no copy)."""
        pieces = flat[: self.numel].split(self.sizes)
        return [piece.view(shape) for piece, shape in zip(pieces, self.shapes)]

    def shard(self, flat: torch.Tensor) -> torch.Tensor:
        """This rank's slice of ``flat`` (a view)."""
        return flat[self.lo : self.lo + self.shard_numel]

    def pieces(self) -> list[tuple[int, slice]]:
        """``(i, where)`` for each parameter ``i`` with numbers in this rank's shard.

        ``shard[where]`` is its part (a parameter may span several ranks; the
        padding belongs to none)."""
        out, start, hi = [], 0, self.lo + self.shard_numel
        for i, size in enumerate(self.sizes):
            a, b = max(start, self.lo), min(start + size, hi)
            if a < b:
                out.append((i, slice(a - self.lo, b - self.lo)))
            start += size
        return out

    def flat_grad(self) -> torch.Tensor:
        """The parameters' gradients, flat and padded; zeros where ``.grad`` is ``None``."""
        return self.flatten([p.grad for p in self.params])


def default_units(net: nn.Module) -> list[nn.Module]:
    """The top-level children of ``net`` that own trainable parameters shared with no
    other child (a tied weight keeps both of its modules in the root)."""
    check_module(net)
    children = list(net.children())
    seen: dict[nn.Parameter, int] = {}
    for m in children:
        for p in m.parameters():
            seen[p] = seen.get(p, 0) + 1
    return [
        m
        for m in children
        if any(p.requires_grad for p in m.parameters())
        and all(seen[p] == 1 for p in m.parameters())
    ]


def _check_layout(params: Sequence[nn.Parameter], world_size: int, rank: int) -> None:
    """At least one parameter, all of one dtype on one device; a rank of the world."""
    if not params:
        raise ValueError("FlatShards needs at least one parameter")
    kinds = {(p.dtype, p.device) for p in params}
    if len(kinds) > 1:
        raise ValueError(
            f"one flat buffer holds one dtype on one device, got {sorted(map(str, kinds))}: "
            f"move the model with net.to(dtype, device) first"
        )
    check_int(world_size, "world_size", 1)
    check_int(rank, "rank", 0, "pass this process's rank, dist.get_rank()", maximum=world_size - 1)


def check_sharding_group(name: str) -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, or a clear error."""
    return check_group(name)
