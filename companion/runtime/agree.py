"""Do the ranks agree? One small collective when a data-parallel wrapper is built.

Used in: chapter 6 (``NaiveDDP``, ``HookedDDP``, ``BucketedDDP``) and chapter 9
(the sharded wrappers).

Data parallelism assumes that every rank holds the same model, built with the
same settings. When one rank's model has one more layer, a differently shaped
parameter, or a different ``bucket_cap_mb``, the ranks post different
collectives and end in a hang (a launch timeout) or an abort, far from the
cause. Like torch's DDP, which compares parameter shapes across ranks when it
is constructed, :func:`check_ranks_agree` gathers from every rank a small
description (each parameter's name, shape, dtype and ``requires_grad``, each
buffer's name, shape and dtype, and the wrapper's settings) with one
``all_gather_object``, and every rank raises the same :class:`RanksDisagree`,
naming the rank and the parameter or setting that differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_module, check_tensor

__all__ = ["RanksDisagree", "describe_replica", "check_ranks_agree", "check_same_tensor_size"]


class RanksDisagree(ValueError):
    """The ranks built different models or settings; names the rank and what differs."""


def describe_replica(module: nn.Module, settings: Mapping[str, Any] | None = None) -> dict:
    """What every rank must agree on: parameters, buffers and ``settings``, as plain data."""
    check_module(module, "module")
    if settings is not None and not isinstance(settings, Mapping):
        raise TypeError(
            f"settings must be a dict of the wrapper's settings, e.g. "
            f"{{'bucket_cap_mb': 25.0}}, got {type(settings).__name__}"
        )
    return {
        "parameter": {
            name: (tuple(p.shape), str(p.dtype), p.requires_grad)
            for name, p in module.named_parameters()
        },
        "buffer": {name: (tuple(b.shape), str(b.dtype)) for name, b in module.named_buffers()},
        "setting": {str(k): repr(v) for k, v in (settings or {}).items()},
    }


def check_ranks_agree(
    module: nn.Module,
    settings: Mapping[str, Any] | None = None,
    wrapper: str = "the wrapper",
    group: Any = None,
) -> None:
    """Raise :class:`RanksDisagree` on every rank unless all ranks describe the same replica.

    Every rank of ``group`` (the default group: ``None``) must call it, at the
    same point (a wrapper's constructor). ``settings`` are the wrapper's own
    (``{"bucket_cap_mb": 25.0}``); ``wrapper`` names it in the error.
    """
    mine = describe_replica(module, settings)
    if not dist.is_initialized():
        raise RuntimeError(
            f"{wrapper} needs a process group to compare the ranks' models: create it "
            f"inside a worker started by companion.runtime.launch (or torchrun)"
        )
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    for rank, theirs in enumerate(everyone[1:], start=1):
        difference = _first_difference(everyone[0], theirs, rank)
        if difference:
            raise RanksDisagree(
                f"{wrapper}: rank {rank} differs from rank 0: {difference}. Build the same "
                f"model with the same settings on every rank (same code, same arguments)"
            )


def check_same_tensor_size(tensor: torch.Tensor, collective: str, group: Any = None) -> None:
    """Raise :class:`RanksDisagree` on every rank unless every rank passes ``collective`` a
    tensor with as many elements, of the same dtype.

    A collective whose ranks post messages of different sizes does not fail
    cleanly: gloo aborts the process (SIGABRT), NCCL may hang. This check is
    one small all-gather, so the hand-written all-reduces run it only when
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` is set, the switch with which torch
    checks its own collectives the same way.
    """
    check_tensor(tensor, "tensor")
    mine = (tensor.numel(), str(tensor.dtype), tuple(tensor.shape))
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    for rank, theirs in enumerate(everyone[1:], start=1):
        if theirs[:2] != everyone[0][:2]:
            raise RanksDisagree(
                f"{collective}: rank {rank} passed a {theirs[1]} tensor of shape {theirs[2]} "
                f"({theirs[0]} elements), rank 0 a {everyone[0][1]} tensor of shape "
                f"{everyone[0][2]} ({everyone[0][0]} elements). Every rank must pass a tensor "
                f"of the same size and dtype"
            )


def _first_difference(first: dict, other: dict, rank: int) -> str:
    """The first thing that differs between rank 0's description and ``rank``'s, or ''."""
    for kind in ("parameter", "buffer", "setting"):
        a, b = first[kind], other[kind]
        for name in a:
            if name not in b:
                return f"rank 0 has {kind} {name!r}, rank {rank} has not"
            if a[name] != b[name]:
                return f"{kind} {name!r} is {_show(kind, a[name])} on rank 0 but {_show(kind, b[name])} on rank {rank}"
        for name in b:
            if name not in a:
                return f"rank {rank} has {kind} {name!r}, rank 0 has not"
        if list(a) != list(b):
            return (
                f"the {kind}s come in a different order on rank {rank}: {list(b)} against {list(a)}"
            )
    return ""


def _show(kind: str, value: Any) -> str:
    if kind == "setting":
        return value
    shape, dtype, *grad = value
    needs = "" if not grad else (", requires_grad" if grad[0] else ", frozen")
    return f"shape {list(shape)}, {dtype.removeprefix('torch.')}{needs}"
