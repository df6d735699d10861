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
finds each rank's own, not yet averaged, gradients. Neither clips correctly,
and nothing in torch would say so: a training script written for DDP (nanoGPT's
``torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)``) would train on in
silence. So a stage, once built, has torch's ``clip_grad_norm_`` and
``clip_grad_value_`` (looked up as ``torch.nn.utils.<name>`` at call time) refuse
its parameters with an error that names the stage's own method
(``_guard_torch_clipping``); every other call goes to torch's function
unchanged. A name bound before the stage was built
(``from torch.nn.utils import clip_grad_norm_``) keeps torch's function.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from ..core.checks import check_module, check_positive

__all__ = ["clip_shards", "clip_grad_norm"]

_STAGES: weakref.WeakSet = weakref.WeakSet()  # the stages built in this process
_GUARDED = ("clip_grad_norm_", "clip_grad_value_")


@torch.no_grad()
def clip_shards(
    shards: Sequence[torch.Tensor],
    max_norm: float,
    group: Any = None,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> torch.Tensor:
    """Scale the gradient ``shards`` of every rank so that the ``norm_type``-norm of the
    whole gradient is at most ``max_norm``; return that norm before clipping (the same on
    every rank). ``error_if_nonfinite``: raise, as torch does, on a NaN or infinite norm."""
    check_positive(max_norm, "max_norm")
    norm = _whole_norm(shards, group, norm_type)
    if error_if_nonfinite and not torch.isfinite(norm):
        raise RuntimeError(
            f"the total norm of order {norm_type} of the gradients is {float(norm)}, so they "
            f"cannot be clipped (error_if_nonfinite=True); nothing was scaled"
        )
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # torch's clip_grad_norm_ rule
    for shard in shards:
        shard.mul_(scale)
    return norm


def _whole_norm(shards: Sequence[torch.Tensor], group: Any, norm_type: float) -> torch.Tensor:
    """The norm of the gradient that the ranks' ``shards`` make up together."""
    if norm_type != math.inf:
        check_positive(norm_type, "norm_type", "2.0, or math.inf for the largest element")
        power = torch.zeros((), dtype=shards[0].dtype, device=shards[0].device)
        for shard in shards:  # padding and unused parameters hold zeros: they add nothing
            power += shard.abs().pow(norm_type).sum()
        dist.all_reduce(power, group=group)  # one number: the sum over the whole gradient
        return power.pow(1.0 / norm_type)
    largest = torch.zeros((), dtype=shards[0].dtype, device=shards[0].device)
    for shard in shards:
        if shard.numel():
            largest = torch.maximum(largest, shard.abs().max())  # NaN if any is NaN
    nan = torch.isnan(largest)
    both = torch.stack([torch.where(nan, 0.0, largest), nan.to(largest.dtype)])
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)  # a backend's MAX may drop NaN
    return both[0] if both[1] == 0 else torch.full_like(both[0], math.nan)


def clip_grad_norm(model: nn.Module, optimizer: Any, max_norm: float) -> torch.Tensor:
    """Clip this step's gradients to ``max_norm`` for any method of :func:`~.training.shard`
    (between ``backward()`` and ``step()``); return the global norm before clipping."""
    check_module(model, "model")
    check_positive(max_norm, "max_norm")
    if hasattr(optimizer, "clip_grad_norm_"):  # a hand-written stage: the shards it reduced
        return optimizer.clip_grad_norm_(max_norm)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # DDP's whole grads
    return norm.full_tensor() if isinstance(norm, DTensor) else norm  # FSDP2: summed shards


def _guard_torch_clipping(stage: Any) -> None:
    """From now on, torch's ``clip_grad_norm_`` and ``clip_grad_value_`` refuse the
    parameters of ``stage`` (their gradients are in its shards, or not yet averaged) and
    behave as torch's for any other parameters."""
    _STAGES.add(stage)
    for name in _GUARDED:
        original = getattr(torch.nn.utils.clip_grad, name)
        if getattr(original, "_refuses_stages", False):
            continue
        guarded = _refusing_stages(original, name)
        setattr(torch.nn.utils.clip_grad, name, guarded)
        setattr(torch.nn.utils, name, guarded)


def _refusing_stages(original, name: str):
    """torch's ``name``, unless its parameters hold a stage's: then a clear error."""

    @functools.wraps(original)
    def guarded(parameters, *args, **kwargs):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        refused = _refusal(params, name)  # a message: the error keeps no stage alive
        if refused:
            raise RuntimeError(refused)
        return original(params, *args, **kwargs)

    guarded._refuses_stages = True
    return guarded


def _refusal(params: list, name: str) -> str | None:
    """Why torch's ``name`` must not clip ``params`` (some stage's), or ``None``."""
    for stage in list(_STAGES):
        if any(id(p) in stage._index for p in params):
            return _misuse(stage, name)
    return None


def _misuse(stage: Any, name: str) -> str:
    kind = type(stage).__name__
    if kind == "Zero1":
        why = (
            "each rank still holds its own gradient, not yet averaged (Zero1 averages it in "
            "step()), so torch would clip by this rank's norm"
        )
    else:
        why = (
            f"backward moved the gradients into each rank's shard, so no parameter holds a "
            f".grad and torch would {'return 0 and ' if name == 'clip_grad_norm_' else ''}"
            f"clip nothing"
        )
    return (
        f"torch.nn.utils.{name} over the parameters of a model that {kind} shards: {why}. "
        f"Call optimizer.{name}(...) between backward() and step() instead: it clips the "
        f"averaged gradient from every rank's shard, as torch's function does under DDP"
    )
