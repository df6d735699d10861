"""A checkpoint that resumes on any number of ranks, exactly.

Used in: chapter 11.

Every replica holds the same bits, so rank 0's model and optimizer state are
the run's. The checkpoint also records the global step and what fixes the
order of additions and of the data (the global batch, the piece, the seed,
the optimizer and its learning rate): a resume with other values would
follow another run, so it is refused with the difference named.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.files import atomic_write
from ..runtime.checkpoint import unwrap
from ..runtime.epochs import Rank
from .step import PieceStep

__all__ = ["save_same_bits", "resume_same_bits"]


def _layout(run: Rank, step: PieceStep, optimizer: str | None, seed: int) -> dict:
    lr = run.optimizer.param_groups[0]["lr"]
    batch, piece = step.loader.global_batch, step.loader.piece
    return dict(global_batch=batch, piece=piece, seed=seed, optimizer=optimizer or "SGD", lr=lr)


def save_same_bits(path: str, run: Rank, step: PieceStep, optimizer: str | None, seed: int) -> Path:
    """Write rank 0's model, optimizer state, global step and layout to ``path``, atomically."""
    state = {
        "model": unwrap(run.net).state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "steps": run.steps,
        "layout": _layout(run, step, optimizer, seed),
    }
    return atomic_write(path, lambda f: torch.save(state, f))


def resume_same_bits(
    path: str, run: Rank, step: PieceStep, optimizer: str | None, seed: int
) -> int:
    """Load ``path`` into this rank; returns the epoch to go on with, its first batches
    skipped so that the data order goes on where it stopped."""
    state = torch.load(path, map_location=run.device, weights_only=True)
    _check_resume(state, _layout(run, step, optimizer, seed), run, path)
    unwrap(run.net).load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.steps = step.steps = state["steps"]
    epoch, done = divmod(run.steps, len(run.train_iter))
    run.train_iter.set_epoch(epoch)
    run.train_iter.skip = done
    return epoch


def _check_resume(state: dict, layout: dict, run: Rank, path: str) -> None:
    differ = {k: (v, layout[k]) for k, v in state["layout"].items() if layout[k] != v}
    if differ:
        said = ", ".join(f"{k} {saved!r} (now {now!r})" for k, (saved, now) in differ.items())
        raise ValueError(f"{path} was saved with {said}: resume with the same to go on exactly")
    if run.max_steps is not None and run.max_steps <= state["steps"]:
        raise ValueError(
            f"{path} is at step {state['steps']}, max_steps={run.max_steps}: nothing to train "
            f"(max_steps counts from the start of the run, as epochs do)"
        )
    if state["steps"] >= run.epochs * len(run.train_iter):
        raise ValueError(
            f"{path} is at step {state['steps']}, the end of {run.epochs} epoch(s): pass more "
            f"epochs (they count from the start of the run)"
        )
