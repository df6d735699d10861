"""A DDP trainer that survives restarts: it snapshots as it goes and resumes on start.

Used in: chapter 8.

``torchrun --max-restarts=K`` restarts *every* worker when one fails, with
the same command. So the command must be resumable: on start, every rank
loads the last snapshot (:mod:`companion.elastic.snapshot`), and training
goes on from the step after it, with the same samples
(:class:`~companion.elastic.sampler.ResumableSampler`), the same
optimizer state, lr schedule and random numbers. The global batch is fixed
(the per-rank batch follows the world size), and so is the lr; the lr warms
up linearly over the first ``warmup_steps`` steps. SGD with momentum ``m``
takes steps about ``1 / (1 - m)`` times larger than plain SGD, so the
default lr is the profile's times ``1 - m``: chapter 5's effective step.

Rank 0 writes a snapshot every ``snapshot_every`` steps and at the end of
each epoch. ``ELASTIC_TEST_KILL=RANK:STEP`` (tests and chapter 8 only) makes
rank ``RANK`` kill itself with SIGKILL after step ``STEP`` of the first
attempt, a crash at a known place.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import torch
import torch.distributed as dist

from ..core.checks import check_choice, check_data, check_int
from ..core.data import Data
from ..core.lines import number_of, say
from ..core.lr import warmup_lr
from ..core.profiles import get_profile
from ..core.results import Record
from ..ddp.config import DDPConfig
from ..ddp.loop import setup_rank, wrap_ddp
from ..runtime.epochs import Rank, train_epochs
from ..sharding.checkpoint import CHECKPOINTED
from ..sharding.training import full_parameters, setup_sharded
from .rendezvous import attempt, join_elastic
from .sampler import ResumableSampler
from .snapshot import (
    check_resumable,
    load_snapshot,
    make_snapshot,
    restore,
    save_sharded_snapshot,
    save_snapshot,
)

__all__ = ["ElasticOptions", "ElasticResult", "warmup_schedule", "train_elastic", "StepLog"]

KILL_VAR = "ELASTIC_TEST_KILL"


SHARDED = tuple(m for m in CHECKPOINTED if m != "DDP")  # what --sharded takes


@dataclass(frozen=True)
class ElasticOptions:
    """What :func:`train_elastic` adds to :class:`~companion.ddp.config.DDPConfig`."""

    snapshot: str  # the snapshot file, on storage every node sees
    snapshot_every: int = 20  # steps between snapshots (and one at each epoch's end)
    momentum: float = 0.9
    warmup_steps: int = 10  # linear lr warm-up
    log_dir: str | None = None  # TensorBoard, rank 0
    sharded: str | None = None  # a chapter-9 method instead of DDP; the snapshot is a folder

    def check(self) -> ElasticOptions:
        check_int(self.snapshot_every, "snapshot_every")
        check_int(self.warmup_steps, "warmup_steps", 0)
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.sharded is not None:
            check_choice(self.sharded, "sharded", SHARDED)
        return self


class ElasticResult(NamedTuple):
    """What :func:`train_elastic` returns on each rank."""

    records: list[Record]  # one per epoch trained in this attempt, on rank 0
    losses: list[tuple[int, float]]  # (global step, mean loss over all ranks)
    params: torch.Tensor  # the final trainable parameters, whole, flattened, on the CPU
    resumed_from: int  # the step of the snapshot loaded at start (0: fresh)


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int):
    """lr from ``lr / (warmup_steps + 1)`` up to ``lr`` over ``warmup_steps`` steps.

    Chapter 7's gradual warm-up rule (:func:`~companion.core.lr.warmup_lr`),
    as a factor of the optimizer's lr, in a scheduler that snapshots keep.
    """
    check_int(warmup_steps, "warmup_steps", 0, "0 for none")
    factor = partial(warmup_lr, lr=1 / (warmup_steps + 1), target=1.0, warmup_steps=warmup_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _resolve(cfg: DDPConfig, opts: ElasticOptions, world: int) -> DDPConfig:
    """``cfg`` resolved; the default lr is the profile's times ``1 - momentum``."""
    if cfg.lr is None:
        cfg = replace(cfg, lr=round(get_profile(cfg.profile).lr * (1 - opts.momentum), 12))
    return cfg.resolve(world)


def _run_config(cfg: DDPConfig, opts: ElasticOptions, data: Data, world: int) -> dict:
    """The config stored in snapshots: what makes a run this run."""
    return {
        "profile": cfg.profile,
        "dataset": data.name,
        "model": cfg.model,
        "global_batch": cfg.global_batch,
        "precision": cfg.precision,
        "lr": cfg.lr,
        "clip": cfg.clip,
        "seed": cfg.seed,
        "momentum": opts.momentum,
        "warmup_steps": opts.warmup_steps,
        "epochs": cfg.epochs,
        "world_size": world,
        "per_rank_batch": cfg.per_rank_batch,
        "log_dir": opts.log_dir,
        "snapshot_every": opts.snapshot_every,
        **({"sharded": opts.sharded} if opts.sharded else {}),  # DDP's predate the option
    }


def _load_agreed(path: str, config: dict) -> dict | None:
    """The snapshot at ``path`` (``None``: none yet), checked against ``config``.

    Every rank must have loaded the same snapshot (storage that every node sees).
    """
    snapshot = load_snapshot(path)
    if snapshot is not None:
        check_resumable(snapshot, config)
    where = None if snapshot is None else (snapshot["epoch"], snapshot["position"])
    seen: list = [None] * dist.get_world_size()
    dist.all_gather_object(seen, where)
    if any(s != seen[0] for s in seen):
        raise RuntimeError(
            f"the ranks found different snapshots (epoch, position by rank: {seen}): "
            f"put the snapshot on storage that every node sees"
        )
    return snapshot


def _kill_if_asked(step: int) -> None:
    """Tests only: ``ELASTIC_TEST_KILL=WHO:STEP`` kills after step STEP of attempt 0.

    ``WHO`` is a rank (that worker dies, its agent restarts the group) or
    ``node`` (every worker of this agent kills the agent, then itself: a node gone).
    """
    who, _, at = os.environ.get(KILL_VAR, "").partition(":")
    if not who or attempt() != 0 or int(at) != step:
        return
    if who == "node":
        say(f"rank {dist.get_rank()}: killing its agent and itself after step {step}")
        os.kill(os.getppid(), signal.SIGKILL)
    elif int(who) != dist.get_rank():
        return
    else:
        say(f"rank {who}: killed with SIGKILL after step {step}")
    os.kill(os.getpid(), signal.SIGKILL)


def train_elastic(data: Data, cfg: DDPConfig, opts: ElasticOptions) -> ElasticResult:
    """Train with DDP (or sharded) from the last snapshot (or afresh); every rank calls it.

    Chapter 5's loop (:mod:`companion.ddp.loop`) with SGD with momentum, a
    resumable sampler and snapshots taken by its ``on_step`` and
    ``on_epoch`` hooks. With ``opts.sharded`` (``"FSDP2"``, ``"ZeRO-3"``, ...)
    the model is sharded as in chapter 9 and every rank writes its shards of
    each snapshot. ``cfg.max_steps`` stops the run after that many global
    steps as a crash would, with no snapshot at that step (a resume starts
    from the last one).
    """
    check_data(data)
    join_elastic()
    world, opts = dist.get_world_size(), opts.check()
    cfg = _resolve(cfg, opts, world)
    config = _run_config(cfg, opts, data, world)
    snapshot = _load_agreed(opts.snapshot, config)
    sampler = ResumableSampler(data.train, world, dist.get_rank(), cfg.seed)
    run = _setup(data, cfg, opts, sampler)
    scheduler = warmup_schedule(run.optimizer, opts.warmup_steps)
    first = position = 0
    if snapshot is not None:
        first, position, run.steps = restore(snapshot, run.net, run.optimizer, scheduler)
    sampler.set_epoch(first, position)
    resumed_from, log = run.steps, StepLog(cfg, opts, sampler, run.steps)

    def save(epoch: int, position: int) -> None:
        at = dict(epoch=epoch, position=position, step=run.steps, config=config)
        if opts.sharded:  # every rank writes its shards
            save_sharded_snapshot(run.net, run.optimizer, scheduler, opts.snapshot, **at)
        elif dist.get_rank() == 0:
            save_snapshot(make_snapshot(run.net, run.optimizer, scheduler, **at), opts.snapshot)

    def on_step(step: int, loss: torch.Tensor, samples: int) -> None:
        nonlocal position
        scheduler.step()
        run.steps, position = step, position + samples * world
        log.step(step, loss, samples)
        if step != cfg.max_steps and step % opts.snapshot_every == 0:
            if position < sampler.total_size:  # the epoch's end has a snapshot of its own
                save(sampler.epoch, position)
                log.say(f"snapshot: step {step}")

    def on_epoch(epoch: int, record: Record | None, samples: int) -> None:
        nonlocal position
        position = 0
        if run.steps != cfg.max_steps:  # stopped as a crash would: no snapshot now
            save(epoch + 1, 0)
            log.epoch_saved(epoch, record, run.steps)

    try:
        records = train_epochs(run, on_step, on_epoch, first_epoch=first)
    finally:
        log.close()
    return ElasticResult(records, log.losses, full_parameters(run.net, run.optimizer), resumed_from)


def _setup(data: Data, cfg: DDPConfig, opts: ElasticOptions, sampler) -> Rank:
    """Chapter 5's rank setup with DDP, or with a chapter-9 method (``opts.sharded``)."""
    if opts.sharded:
        label = f"elastic {opts.sharded}"
        return setup_sharded(data, cfg, opts.sharded, label, opts.momentum, sampler=sampler)
    momentum_sgd = partial(torch.optim.SGD, momentum=opts.momentum)
    return setup_rank(data, cfg, "elastic DDP", wrap_ddp, momentum_sgd, sampler=sampler)


class StepLog:
    """Chapter 8's instruments, outside the trainer: each step's loss, TensorBoard, test kills.

    Each step's loss is averaged over the ranks (one small all-reduce and a
    host synchronisation per step, the price of a per-step loss curve),
    kept in ``losses``, printed by rank 0 when ``cfg.verbose`` and written to
    TensorBoard under ``opts.log_dir``.
    """

    def __init__(self, cfg: DDPConfig, opts: ElasticOptions, sampler, step: int):
        rank, self.epochs = dist.get_rank(), cfg.epochs
        self.verbose = cfg.verbose and rank == 0
        self.losses: list[tuple[int, float]] = []
        self.writer = _open_writer(opts.log_dir, rank, step)
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
        _kill_if_asked(step)

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
