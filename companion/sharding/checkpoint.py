"""Checkpoints of sharded state: saved by N ranks, loaded by M, with ``torch.distributed.checkpoint``.

Used in: chapter 9 (chapter 8's complete snapshot can take this path).

A ZeRO-3 rank holds a shard of each parameter and of each optimizer moment,
so no rank can write ``torch.save(model.state_dict())`` alone, and
gathering everything on rank 0 needs the memory sharding was meant to save.
``torch.distributed.checkpoint`` (DCP) lets every rank write its own
shards, in parallel, plus a metadata file saying which piece of which
tensor is where. Loading asks for the pieces the *new* layout needs, so a
checkpoint written by 2 ranks loads on 1, 3 or 4.

:func:`save_sharded` and :func:`load_sharded` wrap DCP with the
``get_state_dict`` / ``set_state_dict`` helpers, which name the optimizer's
state by parameter *name* (not by position), so it survives resharding.
:func:`checkpoint_worker` trains FSDP2 a few steps, saves or loads, and
reports what a test needs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from ..core.checks import check_choice, check_int
from ..core.training import set_seed
from ..internals.tied_frozen_unused import TiedFrozenUnused
from ..runtime.group import check_group, rank_device
from .flat_state import _saved_keys, load_stage_state, stage_state
from .training import METHODS, full_parameters, shard
from .verify import _share_step
from .zero1 import ShardedOptimizer

__all__ = [
    "save_sharded",
    "load_sharded",
    "is_sharded_checkpoint",
    "last_saved",
    "load_extra",
    "checkpoint_worker",
]

EXTRA = "extra.pt"  # save_sharded's whole state beside the shards
CHECKPOINTED = tuple(m for m in METHODS if m != "ZeroRedundancyOptimizer")  # it consolidates


def save_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: str | Path, extra: dict | None = None
) -> Path:
    """Every rank writes its shards of model and optimizer into the folder ``path``.

    Atomic as a whole: the ranks write into ``path.partial``, and once all
    are done rank 0 moves the last checkpoint to ``path.old`` and the new one
    to ``path``, so a crash leaves the old checkpoint or the new one, never a
    mix; between the two renames the old one is ``path.old``, which
    :func:`last_saved` finds. ``extra`` (rank 0's:
    small, whole state such as the step or an lr scheduler) goes into the
    same folder, for :func:`load_extra`.
    """
    check_group("save_sharded")
    path, partial = Path(path), Path(f"{path}.partial")
    _check_target(path)
    if dist.get_rank() == 0:  # what a crashed save left there must not join this one
        shutil.rmtree(partial, ignore_errors=True)
    dist.barrier()
    if isinstance(optimizer, ShardedOptimizer):  # ZeRO-1/2/3 by hand: flat DTensors
        state = {"stage": stage_state(optimizer)}
    else:  # FSDP2's DTensors, or whole tensors, named by parameter
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
    dcp.save(state, checkpoint_id=str(partial))
    dist.barrier()  # every rank's shards are written
    if dist.get_rank() == 0:
        if extra is not None:
            torch.save(extra, partial / EXTRA)
        old = Path(f"{path}.old")
        if path.exists():  # whole: a crashed save's .old is not needed (os.replace needs it gone)
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(partial, path)  # at every moment path or old is a whole checkpoint
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return path


def last_saved(path: str | Path) -> Path | None:
    """Where the last checkpoint that :func:`save_sharded` wrote at ``path`` is: ``path``,
    or ``path.old`` after a crash between its two renames (``None``: neither exists)."""
    path, old = Path(path), Path(f"{path}.old")
    if path.exists():
        return path
    return old if is_sharded_checkpoint(old) else None


def is_sharded_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder that :func:`save_sharded` wrote."""
    return (Path(path) / ".metadata").is_file()


def load_extra(path: str | Path) -> dict | None:
    """What :func:`save_sharded` was given as ``extra`` (``None``: nothing); no group needed."""
    _check_checkpoint(path)
    extra = Path(path) / EXTRA
    return torch.load(extra, map_location="cpu", weights_only=True) if extra.exists() else None


def _check_target(path: Path) -> None:
    """Refuse to save over what is not a checkpoint: a file, or a folder with other things
    in it (the folder that was there is replaced, and deleted)."""
    if path.exists() and not (
        path.is_dir() and (is_sharded_checkpoint(path) or not any(path.iterdir()))
    ):
        raise ValueError(
            f"{str(path)!r} exists and is not a checkpoint that save_sharded wrote "
            f"({'a file' if not path.is_dir() else 'a folder with other files'}); saving "
            f"there would replace it. Give a new path, or delete it first"
        )


def _check_checkpoint(path: str | Path) -> None:
    """Refuse a folder that is not a whole checkpoint, naming the file at fault: the
    ``.metadata`` missing or unreadable, or a shard file missing or shorter than the
    pieces that ``.metadata`` says it holds (DCP's own error names neither)."""
    if not is_sharded_checkpoint(path):
        raise FileNotFoundError(
            f"no DCP checkpoint at {str(path)!r} (its .metadata file is missing): "
            f"give the folder that save_sharded wrote"
        )
    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as err:  # noqa: BLE001 - unpickling a damaged file raises anything
        raise ValueError(
            f"the checkpoint at {str(path)!r} is damaged: its .metadata file cannot be read "
            f"({type(err).__name__}: {err}). Load an older checkpoint, or save again"
        ) from err
    needed: dict[str, int] = {}  # shard file: the bytes its pieces reach
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, end in sorted(needed.items()):
        file = Path(path) / name
        size = file.stat().st_size if file.is_file() else None
        if size is None or size < end:
            raise ValueError(
                f"the checkpoint at {str(path)!r} is damaged: its shard file {name} is "
                + ("missing" if size is None else f"{size:,} bytes long, {end:,} expected")
                + ". Load an older checkpoint, or save again"
            )


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, path: str | Path) -> None:
    """Every rank reads the pieces its own shards need, whatever the saving world size.

    A checkpoint of another model (a key missing or unexpected) or of another optimizer is
    refused with the names, before anything is loaded (a stage: :func:`load_stage_state`).
    """
    _check_checkpoint(path)
    if isinstance(optimizer, ShardedOptimizer):
        return load_stage_state(optimizer, str(path))
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    fresh = _check_loadable(path, state, optimizer)
    # Partial only where it must be: a parameter never stepped before the save has no
    # optimizer state there. Its state is dropped here, not kept as get_state_dict made it
    # (Adam: step 1, zero moments), so that its first step is a first step, as it is in
    # the run that was never interrupted.
    dcp.load(state, checkpoint_id=str(path), planner=DefaultLoadPlanner(allow_partial_load=True))
    for name in fresh:
        del state["optim"]["state"][name]
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=StateDictOptions(strict=not fresh),  # the keys were checked above
    )


def _names(names, limit: int = 6) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )


def _check_loadable(path: str | Path, state: dict, optimizer: torch.optim.Optimizer) -> list[str]:
    """Refuse a checkpoint that would load partly: a model key missing or unexpected, or
    another optimizer (its settings or its state named otherwise). Returns the parameters
    that have no optimizer state in the checkpoint (never stepped before the save)."""
    saved = _saved_keys(path)
    model = {k.removeprefix("model.") for k in saved if k.startswith("model.")}
    missing, unexpected = set(state["model"]) - model, model - set(state["model"])
    if missing or unexpected:
        raise ValueError(
            f"the checkpoint at {str(path)!r} is not of this model: "
            + "; ".join(
                f"{what}: {_names(names)}"
                for what, names in (
                    (f"{len(missing)} of this model's keys are not in it", missing),
                    (f"{len(unexpected)} of its keys are not in this model", unexpected),
                )
                if names
            )
            + ". Build the model it was saved from (a wrapper such as nn.Sequential or "
            "torch.compile renames the keys), or load a checkpoint of this model"
        )
    groups = state["optim"]["param_groups"]
    settings = {k.rsplit(".", 1)[1] for k in saved if k.startswith("optim.param_groups.")}
    here = {key for group in groups for key in group}
    states = {k.rsplit(".", 1)[1] for k in saved if k.startswith("optim.state.")}
    kept = {key for per_param in state["optim"]["state"].values() for key in per_param}
    if settings != here or (states and kept and states != kept):
        raise ValueError(
            f"the checkpoint at {str(path)!r} holds another optimizer's state than "
            f"{type(optimizer).__name__}'s: its settings {_names(settings ^ here)} and state "
            f"{_names(states ^ kept) or '(the same)'} differ from this one's. Build the "
            f"optimizer it was saved with (the same class and options)"
        )
    stepped = {
        k.removeprefix("optim.state.").rsplit(".", 1)[0]
        for k in saved
        if k.startswith("optim.state.")
    }
    return [name for name in state["optim"]["state"] if name not in stepped]


def checkpoint_worker(
    rank: int,
    world_size: int,
    path: str,
    action: str,
    X: torch.Tensor,
    y: torch.Tensor,
    steps: int = 2,
    method: str = "FSDP2",
) -> dict[str, torch.Tensor]:
    """Worker: ``method`` (FSDP2, or a hand-written stage) with Adam on the chapter-6 model;
    ``action`` ``"save"`` trains ``steps`` steps on ``(X, y)`` and saves, ``"load"`` loads
    into a differently seeded model. Both then take one more step. Returns the whole
    parameters at both moments."""
    check_choice(action, "action", ("save", "load"))
    check_int(steps, "steps", 0)
    check_choice(method, "method", CHECKPOINTED)
    set_seed(0 if action == "save" else 1)
    device = rank_device()
    X, y = X.to(device), y.to(device)
    model, optimizer = shard(method, TiedFrozenUnused().to(device), torch.optim.Adam, lr=1e-2)
    if action == "save":
        for _ in range(steps):
            _share_step(model, optimizer, X, y)
        save_sharded(model, optimizer, path)
    else:
        load_sharded(model, optimizer, path)
    dist.barrier()
    at_checkpoint = full_parameters(model, optimizer)
    _share_step(model, optimizer, X, y)
    return {"at checkpoint": at_checkpoint, "one step later": full_parameters(model, optimizer)}
