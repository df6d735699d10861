"""Uneven local batches: the ranks' mean gradients must be weighed by their sample counts.

Used in: chapter 3.

When the ranks hold ``n_0, n_1, ...`` samples, the gradient of the mean loss
over the global batch is ``sum_r n_r * g_r / sum_r n_r``, where ``g_r`` is
rank ``r``'s mean gradient. Dividing the sum of the ``g_r`` by the world size
(``dist_tuto``'s recipe, and ``average_gradients`` without ``n_local``) gives
every rank's samples the weight of a whole rank. :func:`uneven_gradients` is
a worker that computes both averages with every all-reduce;
:func:`global_gradient` is the single-process gradient they are compared with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..core.batches import check_batch_size
from ..core.models import get_model
from ..core.training import set_seed
from .allreduce import ALLREDUCES
from .partition import average_gradients

__all__ = ["uneven_batch", "global_gradient", "uneven_gradients"]


def uneven_batch(sizes: Sequence[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random global batch of ``sum(sizes)`` 28x28 images and labels, seeded."""
    if len(sizes) == 0:
        raise ValueError("sizes must name at least one rank's sample count, got []")
    for i, n in enumerate(sizes):
        check_batch_size(n, f"sizes[{i}]")
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _backward(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> nn.Module:
    """``net``'s gradient of the mean loss on ``(X, y)``, left in ``.grad``."""
    net.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(X), y).backward()
    return net


def global_gradient(sizes: Sequence[int], model: str = "lenet", seed: int = 0) -> torch.Tensor:
    """One process: the flattened gradient of the mean loss on the whole batch."""
    set_seed(seed)
    net = _backward(get_model(model), *uneven_batch(sizes, seed))
    return torch.cat([p.grad.flatten() for p in net.parameters()])


def uneven_gradients(
    rank: int,
    world_size: int,
    sizes: Sequence[int],
    model: str = "lenet",
    seed: int = 0,
) -> dict[tuple[str, bool], torch.Tensor]:
    """Worker: rank ``r`` takes the ``sizes[r]`` samples after the earlier ranks'.

    For every all-reduce of :data:`ALLREDUCES`, averaged by the world size
    (``weighed=False``) and weighed by sample counts (``True``): the flattened
    gradient, keyed ``(all-reduce, weighed)``.
    """
    _check_sizes(sizes, world_size)
    X, y = uneven_batch(sizes, seed)
    start = sum(sizes[:rank])
    X, y = X[start : start + sizes[rank]], y[start : start + sizes[rank]]
    set_seed(seed)  # the same model on every rank
    net = get_model(model)
    grads = {}
    for allreduce in ALLREDUCES:
        for weighed in (False, True):
            _backward(net, X, y)
            average_gradients(net, allreduce, len(y) if weighed else None)
            grads[allreduce, weighed] = torch.cat([p.grad.flatten() for p in net.parameters()])
    return grads


def _check_sizes(sizes: Sequence[int], world_size: int) -> None:
    if len(sizes) != world_size:
        raise ValueError(f"give one size per rank: {world_size}, got {list(sizes)}")
