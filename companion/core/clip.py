"""Gradient clipping by the global norm, as an option of every training loop.

Used in: chapter 5 (``core.train``, the DDP trainer and those built on it take
``clip``); chapter 9 derives it for ranks that hold only shards
(:mod:`companion.sharding.clip`).
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_instance, check_positive

__all__ = ["clip_before_step"]


def _check_clip(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    check_instance(optimizer, "optimizer", torch.optim.Optimizer, _NOT_AN_OPTIMIZER)
    check_positive(max_norm, "max_norm", "the largest gradient norm a step may take")


def clip_before_step(
    optimizer: torch.optim.Optimizer, max_norm: float, norms: list | None = None
) -> torch.utils.hooks.RemovableHandle:
    """Before each ``optimizer.step()``, scale the gradient so that its global 2-norm is
    at most ``max_norm``, as torch's ``clip_grad_norm_`` does.

    A step pre-hook, so any training step clips: after backward, and under fp16 after
    the scaler has unscaled. Under DDP every rank holds the whole averaged gradient, so
    each computes the global norm alone and all scale alike; an optimizer with a
    ``clip_grad_norm_`` of its own (chapter 9's sharded stages) clips with it. ``norms``,
    if given, collects each norm before clipping. ``.remove()`` the handle to stop.
    """
    _check_clip(optimizer, max_norm)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    own = getattr(optimizer, "clip_grad_norm_", None)  # the norm over every rank's shard

    def clip(*_) -> None:
        norm = own(max_norm) if own is not None else nn.utils.clip_grad_norm_(params, max_norm)
        if norms is not None:
            norms.append(norm.detach())

    return optimizer.register_step_pre_hook(clip)


_NOT_AN_OPTIMIZER = "pass the torch.optim.Optimizer that steps the model"
