"""Complete snapshots: everything a restarted run needs to go on as if nothing happened.

Used in: chapter 8.

A checkpoint of chapter 5 holds the model; a restarted run that loads only
the model would reset the optimizer's momentum and the learning-rate
schedule, start the epoch over and draw other random numbers, and end up
somewhere else. A *snapshot* holds all of it:

* the model (unwrapped), the optimizer and the lr scheduler;
* where the run is: the epoch, the position within the epoch (samples
  already consumed, see :mod:`companion.elastic.sampler`) and the global step;
* the random states: Python's, torch's on the CPU and on every CUDA device,
  *as rank 0 holds them*: every rank restores rank 0's states. Streams that
  differ by rank (dropout or augmentation seeded with the rank) are not
  captured, so a resumed run draws other numbers there; the book's models
  draw none during training;
* the run's config, to refuse a snapshot from a different run.

Rank 0 writes it atomically (:func:`~companion.core.files.atomic_write`: a temporary
file, fsync, ``os.replace``), so a writer killed mid-save leaves the previous snapshot
whole. Every rank loads it on start. A snapshot written with another world size is
*resumed*, the rest of the epoch re-sharded over the new ranks, when the global batch is
a multiple of the new world size; otherwise, and for other config changes, it is refused.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.checks import check_instance, check_int, check_module
from ..core.files import atomic_write
from ..runtime.checkpoint import unwrap

__all__ = [
    "SnapshotError",
    "RESUMABLE_CHANGES",
    "rng_state",
    "set_rng_state",
    "make_snapshot",
    "save_snapshot",
    "load_snapshot",
    "restore",
    "restore_rest",
    "check_format",
    "check_resumable",
    "describe_snapshot",
]

FORMAT = 1
# Config entries that may differ between the run that wrote a snapshot and the one that
# resumes it: more epochs, another world size (re-sharded), where the logs go.
RESUMABLE_CHANGES = ("epochs", "world_size", "per_rank_batch", "log_dir", "snapshot_every")


class SnapshotError(ValueError):
    """A snapshot that cannot be read, or does not belong to this run."""


def rng_state() -> dict[str, Any]:
    """The random states of Python, torch's CPU generator and every CUDA device."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured (CUDA states on the GPUs there are)."""
    if not isinstance(state, dict) or not {"python", "torch", "cuda"} <= set(state):
        raise TypeError(
            f"state must be what rng_state() returns (a dict), got {type(state).__name__}"
        )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def make_snapshot(
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    epoch: int,
    position: int,
    step: int,
    config: dict[str, Any],
    sharded: bool = False,
) -> dict[str, Any]:
    """Everything to resume at ``(epoch, position)``, after ``step`` global steps.

    ``sharded``: the model and optimizer are left out (``None``), as every
    rank writes its own shards of them (chapter 9's
    ``companion.sharding.snapshot.save_sharded_snapshot``).
    """
    _check_parts(net, optimizer, scheduler, epoch=epoch, position=position, step=step)
    cpu = lambda state: {k: v.detach().cpu() for k, v in state.items()}  # noqa: E731
    return {
        "format": FORMAT,
        "model": None if sharded else cpu(unwrap(net).state_dict()),
        "optimizer": None if sharded else optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "position": position,
        "step": step,
        "rng": rng_state(),
        "config": dict(config),
    }


def _check_parts(net, optimizer, scheduler, **counts: int) -> None:
    check_module(net)
    check_instance(optimizer, "optimizer", torch.optim.Optimizer, "pass the optimizer itself")
    check_instance(
        scheduler,
        "scheduler",
        torch.optim.lr_scheduler.LRScheduler,
        "pass warmup_schedule(optimizer, 0) for a run without warm-up",
    )
    for name, value in counts.items():
        check_int(value, name, 0)


def save_snapshot(snapshot: dict[str, Any], path: str | Path) -> Path:
    """Write ``snapshot`` to ``path`` atomically (call it on rank 0 only); returns the path."""
    return atomic_write(path, lambda f: torch.save(snapshot, f))


def load_snapshot(path: str | Path) -> dict[str, Any] | None:
    """The snapshot at ``path``, or ``None`` if there is none yet (a fresh run).

    A file that is not a snapshot raises :class:`SnapshotError`; tensors are
    read onto the CPU (``weights_only``: no code runs while loading).
    """
    path = Path(path)
    if path.is_dir():
        raise SnapshotError(
            f"{path} is a directory; give the snapshot's file name (a sharded snapshot, a "
            f"folder, is read by chapter 9's load_sharded_snapshot)"
        )
    if not path.exists():
        return None
    try:
        snapshot = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise SnapshotError(unreadable(path, err)) from err
    return check_format(snapshot, path)


def unreadable(path: Path, err: Exception) -> str:
    """Why ``path`` could not be read as a snapshot, and what to do."""
    return (
        f"{path} is not a readable snapshot ({type(err).__name__}); it may be "
        f"another kind of file: delete it to start afresh, or point to the right file"
    )


def check_format(snapshot: Any, path: Path) -> dict[str, Any]:
    """``snapshot`` read from ``path`` if it has this format, else a ``SnapshotError``."""
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        raise SnapshotError(
            f"{path} is not a snapshot of this format (a chapter 5 checkpoint holds the "
            f"model only); give a file written by save_snapshot, or another path"
        )
    return snapshot


def restore(
    snapshot: dict[str, Any],
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> tuple[int, int, int]:
    """Load ``snapshot`` into model, optimizer, scheduler and RNGs; ``(epoch, position, step)``."""
    check_snapshot(snapshot)
    unwrap(net).load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return restore_rest(snapshot, scheduler)


def restore_rest(
    snapshot: dict[str, Any], scheduler: torch.optim.lr_scheduler.LRScheduler
) -> tuple[int, int, int]:
    """What every snapshot holds beside the model and optimizer: the schedule and the RNGs;
    ``(epoch, position, step)``."""
    check_snapshot(snapshot)
    scheduler.load_state_dict(snapshot["scheduler"])
    set_rng_state(snapshot["rng"])
    return snapshot["epoch"], snapshot["position"], snapshot["step"]


def check_resumable(snapshot: dict[str, Any], config: dict[str, Any]) -> None:
    """Raise :class:`SnapshotError` unless this run (``config``) may resume ``snapshot``.

    The world size may change when the global batch is a multiple of the new
    one (the rest of the epoch is re-sharded); so may the epochs and where
    logs go. Any other difference (model, global batch, lr, seed, ...) means
    another run.
    """
    saved = check_snapshot(snapshot)["config"]
    differ = sorted(
        k
        for k in set(saved) | set(config)
        if k not in RESUMABLE_CHANGES and saved.get(k) != config.get(k)
    )
    if differ:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {config.get(k)!r}" for k in differ)
        raise SnapshotError(
            f"the snapshot was written by another run ({diffs}); run with the same "
            f"options, or give another snapshot path to start afresh"
        )
    world = config["world_size"]
    if saved["global_batch"] % world:
        raise SnapshotError(
            f"the snapshot's global batch {saved['global_batch']} cannot be split "
            f"over {world} processes; resume with a world size that divides it"
        )


def _where(epoch: int, position: int, epochs: int | None) -> str:
    """The snapshot's place, with epochs counted from 1 as the trainer's log counts them."""
    if position:
        return f"epoch {epoch + 1}, {position} samples into it"
    done = f"{epoch} of {epochs} epochs done" if epochs else f"{epoch} epoch(s) done"
    return done + (" (the run is finished)" if epochs and epoch >= epochs else "")


def describe_snapshot(snapshot: dict[str, Any]) -> str:
    """A few lines on what a snapshot holds."""
    check_snapshot(snapshot)
    config, rng = snapshot["config"], snapshot["rng"]
    if "sharded" in snapshot:
        files = sorted(Path(snapshot["sharded"]).glob("*.distcp"))
        held = [
            f"model:     in shards, {len(files)} DCP file(s) (one per saving rank)",
            f"optimizer: lr {snapshot['scheduler']['_last_lr'][0]:.4g}, moments in the shards",
        ]
    else:
        state = snapshot["optimizer"]["state"]
        momentum = sum(1 for s in state.values() if s.get("momentum_buffer") is not None)
        held = [
            f"model:     {len(snapshot['model'])} tensors, "
            f"{sum(t.numel() for t in snapshot['model'].values()):,} numbers",
            f"optimizer: lr {snapshot['optimizer']['param_groups'][0]['lr']:.4g}, "
            f"{momentum} momentum buffers",
        ]
    return "\n".join(
        [
            f"where:     {_where(snapshot['epoch'], snapshot['position'], config.get('epochs'))}, "
            f"after {snapshot['step']} global steps",
            *held,
            f"scheduler: {snapshot['scheduler']['last_epoch']} steps taken",
            f"rng:       rank 0's python, torch CPU, {len(rng['cuda'])} CUDA device(s) "
            "(restored on every rank)",
            _config_lines(config),
        ]
    )


def _config_lines(config: dict[str, Any]) -> str:
    entries = "config:    " + ", ".join(f"{k}={v}" for k, v in sorted(config.items()))
    return textwrap.fill(entries, 88, subsequent_indent=" " * 11)


def check_snapshot(snapshot: Any, name: str = "snapshot") -> dict[str, Any]:
    """``snapshot`` if it is a snapshot of this format, else a ``SnapshotError`` saying why."""
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        what = (
            f"a dict whose 'format' is not {FORMAT}"
            if isinstance(snapshot, dict)
            else type(snapshot).__name__
        )
        raise SnapshotError(
            f"{name} is not a snapshot ({what}): pass what make_snapshot returns or "
            f"load_snapshot reads"
        )
    return snapshot
