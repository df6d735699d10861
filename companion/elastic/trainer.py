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
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_data, check_int
from ..core.data import Data
from ..core.devices import hardware_label
from ..core.lines import say
from ..core.profiles import get_profile
from ..core.results import Record
from ..core.training import Timer, flat_params, train_step
from ..ddp.config import DDPConfig
from ..ddp.sampling import SampledLoader, evaluate_distributed
from ..ddp.training import build_ddp
from ..runtime.group import rank_device
from .rendezvous import attempt, join_elastic
from .sampler import ResumableSampler
from .snapshot import (
    check_resumable,
    load_snapshot,
    make_snapshot,
    restore,
    save_snapshot,
)

__all__ = ["ElasticOptions", "ElasticResult", "warmup_schedule", "train_elastic"]

KILL_VAR = "ELASTIC_TEST_KILL"


@dataclass(frozen=True)
class ElasticOptions:
    """What :func:`train_elastic` adds to :class:`~companion.ddp.config.DDPConfig`."""

    snapshot: str  # the snapshot file, on storage every node sees
    snapshot_every: int = 20  # steps between snapshots (and one at each epoch's end)
    momentum: float = 0.9
    warmup_steps: int = 10  # linear lr warm-up
    log_dir: str | None = None  # TensorBoard, rank 0

    def check(self) -> ElasticOptions:
        check_int(self.snapshot_every, "snapshot_every")
        check_int(self.warmup_steps, "warmup_steps", 0)
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        return self


class ElasticResult(NamedTuple):
    """What :func:`train_elastic` returns on each rank."""

    records: list[Record]  # one per epoch trained in this attempt, on rank 0
    losses: list[tuple[int, float]]  # (global step, mean loss over all ranks)
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    resumed_from: int  # the step of the snapshot loaded at start (0: fresh)


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int):
    """lr from ``lr / (warmup_steps + 1)`` up to ``lr`` over ``warmup_steps`` steps."""
    return torch.optim.lr_scheduler.LinearLR(
        optimizer, 1 / (warmup_steps + 1), 1.0, total_iters=warmup_steps
    )


def _run_config(cfg: DDPConfig, opts: ElasticOptions, data: Data, world: int) -> dict:
    """The config stored in snapshots: what makes a run this run."""
    return {
        "profile": cfg.profile,
        "dataset": data.name,
        "model": cfg.model,
        "global_batch": cfg.global_batch,
        "lr": cfg.lr,
        "seed": cfg.seed,
        "momentum": opts.momentum,
        "warmup_steps": opts.warmup_steps,
        "epochs": cfg.epochs,
        "world_size": world,
        "per_rank_batch": cfg.per_rank_batch,
        "log_dir": opts.log_dir,
        "snapshot_every": opts.snapshot_every,
    }


def _agree(snapshot: dict | None) -> None:
    """Every rank must have loaded the same snapshot (storage that every node sees)."""
    where = None if snapshot is None else (snapshot["epoch"], snapshot["position"])
    seen: list = [None] * dist.get_world_size()
    dist.all_gather_object(seen, where)
    if any(s != seen[0] for s in seen):
        raise RuntimeError(
            f"the ranks found different snapshots (epoch, position by rank: {seen}): "
            f"put the snapshot on storage that every node sees"
        )


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
    """Train with DDP from the last snapshot (or afresh); every rank calls it.

    ``cfg.max_steps`` stops the run after that many global steps as a crash
    would, with no snapshot at that step (a resume starts from the last one).
    """
    check_data(data)
    join_elastic()
    rank, world = dist.get_rank(), dist.get_world_size()
    opts = opts.check()
    if cfg.lr is None:
        cfg = replace(cfg, lr=round(get_profile(cfg.profile).lr * (1 - opts.momentum), 12))
    cfg = cfg.resolve(world)
    config = _run_config(cfg, opts, data, world)
    snapshot = load_snapshot(opts.snapshot)
    if snapshot is not None:
        check_resumable(snapshot, config)
    _agree(snapshot)
    device = rank_device()
    sampler = ResumableSampler(data.train, world, rank, cfg.seed)
    train_iter = SampledLoader(data.train, sampler, cfg.per_rank_batch, device)
    X, y = next(iter(train_iter))
    net = build_ddp(cfg.model, device, X, y, cfg.lr, cfg.seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=opts.momentum)
    scheduler = warmup_schedule(optimizer, opts.warmup_steps)
    first, position, step = 0, 0, 0
    if snapshot is not None:
        first, position, step = restore(snapshot, net, optimizer, scheduler)
    log = say if rank == 0 and cfg.verbose else lambda *a: None
    log(
        f"attempt {attempt()}: {world} processes, "
        + (
            f"resumed from step {step} (epoch {first + 1}, position {position})"
            if snapshot
            else "no snapshot, starting afresh"
        )
    )
    writer = _open_writer(opts.log_dir, rank, step)
    records, losses, resumed_from = [], [], step

    def save(at_epoch: int, at_position: int) -> None:
        if rank == 0:
            save_snapshot(
                make_snapshot(
                    net,
                    optimizer,
                    scheduler,
                    epoch=at_epoch,
                    position=at_position,
                    step=step,
                    config=config,
                ),
                opts.snapshot,
            )

    loss_fn = nn.CrossEntropyLoss()
    try:
        for epoch in range(first, cfg.epochs):
            sampler.set_epoch(epoch, position)
            last = len(train_iter)
            with Timer(device) as timer:
                for i, (X, y) in enumerate(train_iter, 1):
                    loss = train_step(net, X, y, loss_fn, optimizer) * len(y)
                    scheduler.step()
                    step, position = step + 1, position + len(y) * world
                    totals = torch.stack([loss, torch.tensor(float(len(y)), device=device)])
                    dist.all_reduce(totals)
                    losses.append((step, float(totals[0] / totals[1])))
                    log(f"step {step} loss {losses[-1][1]:.4f}")
                    if writer is not None:
                        writer.add_scalar("train/loss", losses[-1][1], step)
                    _kill_if_asked(step)
                    if step == cfg.max_steps:
                        break
                    if step % opts.snapshot_every == 0 and i < last:
                        save(epoch, position)
                        log(f"snapshot: step {step}")
            if step == cfg.max_steps:  # stop here, as a crash would: no snapshot now
                break
            test_acc = evaluate_distributed(net.module, data.test, device)
            position = 0
            save(epoch + 1, 0)
            if rank == 0:
                records.append(
                    Record(
                        "elastic DDP",
                        world,
                        epoch + 1,
                        test_acc,
                        timer.seconds,
                        len(sampler) * world / timer.seconds,
                        losses[-1][1],
                        hardware_label(),
                        cfg.profile,
                        cfg.model,
                        data.name,
                    )
                )
            log(
                f"epoch {epoch + 1}/{cfg.epochs}: test accuracy {test_acc:.4f}, "
                f"snapshot: step {step}"
            )
    finally:
        if writer is not None:
            writer.close()
    return ElasticResult(records, losses, flat_params(net), resumed_from)


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
