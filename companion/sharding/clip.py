"""Gradient clipping by the global norm, when no rank holds the whole gradient.

Used in: chapter 9.

``torch.nn.utils.clip_grad_norm_(params, max_norm)`` scales every gradient by
``min(1, max_norm / (norm + 1e-6))``, where ``norm`` is the 2-norm of all
gradients together. Under DDP each rank holds the whole averaged gradient,
so the local norm is the global one. Under ZeRO-2 and ZeRO-3 each rank holds
only its shard of the averaged gradient (ZeRO-1 gets there in ``step()``),
so no rank can compute the norm alone: :func:`clip_shards` has each rank sum
the squares of its shards, adds the ranks' sums with one all-reduce of a
single number, and has every rank scale its shards by the same factor. The
stages expose it as ``optimizer.clip_grad_norm_(max_norm)``, called between
``backward()`` and ``step()`` as torch's function is; :func:`clip_grad_norm`
picks the right one for any method of the chapter (FSDP2's gradients are
``DTensor`` shards, which torch's function already handles with a collective).

Calling torch's function on a ZeRO-2 or ZeRO-3 model instead finds no
gradients (the hooks moved them into the shards) and returns 0; on ZeRO-1 it
finds each rank's own, not yet averaged, gradients. Neither clips correctly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from ..core.checks import check_module, check_positive

__all__ = ["clip_shards", "clip_grad_norm"]


@torch.no_grad()
def clip_shards(shards: Sequence[torch.Tensor], max_norm: float, group: Any = None) -> torch.Tensor:
    """Scale the gradient ``shards`` of every rank so that the norm of the whole gradient
    is at most ``max_norm``; return that norm before clipping (the same on every rank)."""
    check_positive(max_norm, "max_norm")
    square = torch.zeros((), dtype=shards[0].dtype, device=shards[0].device)
    for shard in shards:  # padding and unused parameters hold zeros: they add nothing
        square += shard.pow(2).sum()
    dist.all_reduce(square, group=group)  # one number: the whole gradient's squared norm
    norm = square.sqrt()
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # torch's clip_grad_norm_ rule
    for shard in shards:
        shard.mul_(scale)
    return norm


def clip_grad_norm(model: nn.Module, optimizer: Any, max_norm: float) -> torch.Tensor:
    """Clip this step's gradients to ``max_norm`` for any method of :func:`~.training.shard`
    (between ``backward()`` and ``step()``); return the global norm before clipping."""
    check_module(model, "model")
    check_positive(max_norm, "max_norm")
    if hasattr(optimizer, "clip_grad_norm_"):  # a hand-written stage: the shards it reduced
        return optimizer.clip_grad_norm_(max_norm)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # DDP's whole grads
    return norm.full_tensor() if isinstance(norm, DTensor) else norm  # FSDP2: summed shards
