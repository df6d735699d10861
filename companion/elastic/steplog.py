"""Chapter 8's instruments, outside the trainer: each step's loss, TensorBoard, test kills.

Used in: chapter 8 (:func:`~companion.elastic.trainer.train_elastic` keeps one per run).
"""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist

from ..core.lines import number_of, say
from ..core.results import Record
from ..ddp.config import DDPConfig
from .rendezvous import attempt

__all__ = ["StepLog", "parse_kill"]


def parse_kill(text: str) -> tuple[str, int]:
    """``"RANK:STEP"`` or ``"node:STEP"`` as ``(who, step)``; a clear error otherwise."""
    who, _, step = str(text).partition(":")
    if not (who == "node" or who.isdigit()) or not step.isdigit():
        raise ValueError(
            f"kill_after must be 'RANK:STEP' or 'node:STEP' (e.g. '1:30'), got {text!r}"
        )
    return who, int(step)


def _kill_if_asked(kill_after: str | None, step: int) -> None:
    """Tests and chapter 8: ``kill_after="WHO:STEP"`` kills after step STEP of attempt 0.

    ``WHO`` is a rank (that worker dies, its agent restarts the group) or
    ``node`` (every worker of this agent kills the agent, then itself: a node gone).
    """
    if kill_after is None:
        return
    who, at = parse_kill(kill_after)
    if attempt() != 0 or at != step:
        return
    if who == "node":
        say(f"rank {dist.get_rank()}: killing its agent and itself after step {step}")
        os.kill(os.getppid(), signal.SIGKILL)
    elif int(who) != dist.get_rank():
        return
    else:
        say(f"rank {who}: killed with SIGKILL after step {step}")
    os.kill(os.getpid(), signal.SIGKILL)


class StepLog:
    """Chapter 8's instruments, outside the trainer: each step's loss, TensorBoard, test kills.

    Each step's loss is averaged over the ranks (one small all-reduce and a
    host synchronisation per step, the price of a per-step loss curve),
    kept in ``losses``, printed by rank 0 when ``cfg.verbose`` and written to
    TensorBoard under ``opts.log_dir``.
    """

    def __init__(self, cfg: DDPConfig, opts, sampler, step: int):  # opts: ElasticOptions
        rank, self.epochs = dist.get_rank(), cfg.epochs
        self.verbose = cfg.verbose and rank == 0
        self.losses: list[tuple[int, float]] = []
        self.writer = _open_writer(opts.log_dir, rank, step)
        self.kill_after = opts.kill_after
        where = f"epoch {sampler.epoch + 1}, position {sampler.start}"
        self.say(
            f"attempt {attempt()}: {number_of(dist.get_world_size(), 'process')}, "
            + (f"resumed from step {step} ({where})" if step else "no snapshot, starting afresh")
        )

    def say(self, line: str) -> None:
        if self.verbose:
            say(line)

    def step(self, step: int, loss_sum: torch.Tensor, samples: int) -> None:
        totals = torch.stack([loss_sum.double(), loss_sum.new_tensor(samples, dtype=torch.float64)])
        dist.all_reduce(totals)
        self.losses.append((step, float(totals[0] / totals[1])))
        self.say(f"step {step} loss {self.losses[-1][1]:.4f}")
        if self.writer is not None:
            self.writer.add_scalar("train/loss", self.losses[-1][1], step)
        _kill_if_asked(self.kill_after, step)

    def epoch_saved(self, epoch: int, record: Record | None, step: int) -> None:
        if record is not None:  # rank 0's
            self.say(
                f"epoch {epoch + 1}/{self.epochs}: test accuracy {record.test_acc:.4f}, "
                f"snapshot: step {step}"
            )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _open_writer(log_dir: str | None, rank: int, step: int):
    """Rank 0's TensorBoard writer; ``purge_step`` drops the steps a restart replays.

    The directory is never deleted: the earlier attempts' logs stay, and
    TensorBoard discards their points from ``step + 1`` on, which this
    attempt writes again.
    """
    if log_dir is None or rank != 0:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir, purge_step=step + 1)
