"""Chapter 8's snapshots of a sharded model, and chapter 8's elastic trainer on chapter 9's methods.

Used in: chapter 9 (and ``python -m companion.elastic --sharded``).

Chapter 8's snapshot is one file that rank 0 writes. Under sharding no rank
holds the whole model, so every rank writes its shards of the model and
optimizer with DCP (:func:`~companion.sharding.checkpoint.save_sharded`) and
rank 0 adds the rest of chapter 8's snapshot (where the run is, the schedule,
the random states, the config) beside them: a folder that loads on any number
of ranks. :data:`ELASTIC_METHODS` hands these methods to chapter 8's trainer,
which cannot import this chapter.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.data import Data
from ..ddp.config import DDPConfig
from ..elastic.snapshot import (
    SnapshotError,
    check_format,
    check_snapshot,
    make_snapshot,
    restore_rest,
    unreadable,
)
from ..elastic.trainer import ElasticMethod
from ..runtime.epochs import Rank
from .checkpoint import (
    CHECKPOINTED,
    is_sharded_checkpoint,
    last_saved,
    load_extra,
    load_sharded,
    save_sharded,
)
from .training import full_parameters, setup_sharded

__all__ = [
    "save_sharded_snapshot",
    "load_sharded_snapshot",
    "restore_sharded",
    "ELASTIC_METHODS",
]


def save_sharded_snapshot(
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    path: str | Path,
    **at: Any,
) -> Path:
    """A snapshot of a sharded model (FSDP2, ZeRO-3), written by *every* rank into ``path``.

    No rank holds the whole model, so each writes its shards of the model and
    optimizer (:func:`~companion.sharding.checkpoint.save_sharded`, DCP); rank
    0 adds the rest of the snapshot beside them (``at``: ``make_snapshot``'s
    ``epoch``, ``position``, ``step``, ``config``). The folder replaces the last
    one atomically, and loads on another world size.
    """
    rest = make_snapshot(net, optimizer, scheduler, **at, sharded=True)
    return save_sharded(net, optimizer, path, extra=rest)


def load_sharded_snapshot(path: str | Path) -> dict[str, Any] | None:
    """Rank 0's part of the sharded snapshot at ``path`` (``None``: none yet), or at
    ``path.old`` after a crash mid-save (:func:`~companion.sharding.checkpoint.last_saved`);
    the shards are read by :func:`restore_sharded`."""
    path = last_saved(path)
    if path is None:
        return None
    if not is_sharded_checkpoint(path):
        raise SnapshotError(
            f"{path} is not a sharded snapshot (a folder that save_sharded_snapshot wrote); "
            f"give its folder, or a new path to start afresh"
        )
    try:
        snapshot = {**load_extra(path), "sharded": str(path)}
    except Exception as err:
        raise SnapshotError(unreadable(path, err)) from err
    return check_format(snapshot, path)


def restore_sharded(
    snapshot: dict[str, Any],
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> tuple[int, int, int]:
    """Every rank reads the pieces of its own shards, then the rest; ``(epoch, position,
    step)``."""
    check_snapshot(snapshot)
    load_sharded(net, optimizer, snapshot["sharded"])
    return restore_rest(snapshot, scheduler)


def _setup(method: str, data: Data, cfg: DDPConfig, momentum: float, sampler, label: str) -> Rank:
    return setup_sharded(data, cfg, method, label, momentum, sampler=sampler)


def _save(net, optimizer, scheduler, path, **at) -> None:
    save_sharded_snapshot(net, optimizer, scheduler, path, **at)  # every rank writes


ELASTIC_METHODS: dict[str, ElasticMethod] = {
    method: ElasticMethod(
        method,
        partial(_setup, method),
        _save,
        load_sharded_snapshot,
        restore_sharded,
        full_parameters,
    )
    for method in CHECKPOINTED
    if method != "DDP"
}
