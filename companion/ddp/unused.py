"""Parameters that ``forward`` never uses, found before DDP trains.

Used in: chapter 5.

DDP's reducer waits, in every backward pass, for a gradient of every
parameter it manages. A parameter that the forward pass does not use never
gets one, so the first step's reduction never finishes and the second step
fails with "Expected to have finished reduction in the prior iteration". The
cure is ``DistributedDataParallel(..., find_unused_parameters=True)``, which
walks the autograd graph from the outputs after every forward pass to mark
the parameters that will get no gradient: an extra traversal of the graph
every step, paid even when every parameter is used. Hence it is off by
default, and :func:`check_unused_parameters` looks once, before training.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..core.devices import gpu_indices

__all__ = ["UnusedParameters", "unused_parameters", "check_unused_parameters"]


class UnusedParameters(ValueError):
    """The model has trainable parameters that its forward pass does not use."""


def unused_parameters(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> list[str]:
    """Names of ``net``'s trainable parameters left without a gradient by one step.

    One forward and backward pass of the cross-entropy loss on ``(X, y)``, on
    a copy (``net`` and the random streams are left as they were). The rule
    is DDP's own: a parameter that receives no gradient in a backward pass is
    unused. A parameter used only on some batches (control flow that depends
    on the data) may escape this one look.
    """
    if len(X) != len(y):
        raise ValueError(f"X and y must hold the same number of samples, got {len(X)} and {len(y)}")
    with torch.random.fork_rng(devices=gpu_indices([X.device])):
        shadow = copy.deepcopy(net)
        shadow.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(shadow(X), y).backward()
    return [name for name, p in shadow.named_parameters() if p.requires_grad and p.grad is None]


def check_unused_parameters(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> None:
    """Raise :class:`UnusedParameters`, naming them, if ``forward`` leaves any unused."""
    if names := unused_parameters(net, X, y):
        raise UnusedParameters(
            f"the model's forward pass does not use the parameters {names}, and "
            f"DistributedDataParallel would fail at the second step waiting for "
            f"their gradients: remove them from the model, or pass "
            f"find_unused_parameters=True (train_ddp, DDPConfig; "
            f"--find-unused-parameters on the command line), which costs an extra "
            f"traversal of the autograd graph every step"
        )
