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
each epoch. ``kill_after="RANK:STEP"`` (tests and chapter 8 only) makes
rank ``RANK`` kill itself with SIGKILL after step ``STEP`` of the first
attempt, a crash at a known place.

The trainer trains an :class:`ElasticMethod`: chapter 5's DDP (:data:`DDP`)
unless a later chapter hands it another (chapter 9's sharded methods,
``companion.sharding.snapshot.ELASTIC_METHODS``): this chapter imports none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from ..core.checks import check_data, check_instance, check_int
from ..core.data import Data
from ..core.lr import warmup_lr
from ..core.profiles import get_profile
from ..core.results import Record
from ..ddp.config import DDPConfig
from ..ddp.loop import setup_rank, wrap_ddp
from ..runtime.epochs import Rank, train_epochs
from .rendezvous import join_elastic
from .sampler import ResumableSampler
from .snapshot import check_resumable, load_snapshot, make_snapshot, restore, save_snapshot
from .steplog import StepLog, parse_kill

__all__ = [
    "ElasticMethod",
    "DDP",
    "ElasticOptions",
    "ElasticResult",
    "warmup_schedule",
    "train_elastic",
]


class ElasticMethod(NamedTuple):
    """How :func:`train_elastic` builds a rank, and writes, reads and restores snapshots."""

    name: str
    setup: Callable[..., Rank]  # (data, cfg, momentum, sampler, label) -> Rank
    save: Callable[..., Any]  # (net, optimizer, scheduler, path, **at), called on every rank
    load: Callable[[str], dict | None]  # path -> snapshot (None: none yet)
    restore: Callable[..., tuple[int, int, int]]  # (snapshot, net, optimizer, scheduler)
    whole: Callable[..., torch.Tensor]  # (net, optimizer) -> the trainable parameters, flat


def _ddp_setup(data: Data, cfg: DDPConfig, momentum: float, sampler, label: str) -> Rank:
    momentum_sgd = partial(torch.optim.SGD, momentum=momentum)
    return setup_rank(data, cfg, label, wrap_ddp, momentum_sgd, sampler=sampler)


def _ddp_save(net, optimizer, scheduler, path, **at) -> None:
    if dist.get_rank() == 0:  # every rank holds the whole model: one writes
        save_snapshot(make_snapshot(net, optimizer, scheduler, **at), path)


def _ddp_whole(net: torch.nn.Module, optimizer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in net.parameters() if p.requires_grad])


DDP = ElasticMethod("DDP", _ddp_setup, _ddp_save, load_snapshot, restore, _ddp_whole)


@dataclass(frozen=True)
class ElasticOptions:
    """What :func:`train_elastic` adds to :class:`~companion.ddp.config.DDPConfig`."""

    snapshot: str  # the snapshot file, on storage every node sees
    snapshot_every: int = 20  # steps between snapshots (and one at each epoch's end)
    momentum: float = 0.9
    warmup_steps: int = 10  # linear lr warm-up
    log_dir: str | None = None  # TensorBoard, rank 0
    method: ElasticMethod = DDP  # or a later chapter's (chapter 9's: the snapshot is a folder)
    kill_after: str | None = None  # tests and chapter 8: "RANK:STEP" or "node:STEP"

    def check(self) -> ElasticOptions:
        check_int(self.snapshot_every, "snapshot_every")
        check_int(self.warmup_steps, "warmup_steps", 0)
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        check_instance(self.method, "method", ElasticMethod, "e.g. DDP, or ELASTIC_METHODS[name]")
        if self.kill_after is not None:
            parse_kill(self.kill_after)
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
        **({"sharded": opts.method.name} if opts.method.name != "DDP" else {}),  # DDP's predate it
    }


def _load_agreed(load: Callable, path: str, config: dict) -> dict | None:
    """The snapshot at ``path`` read by ``load`` (``None``: none yet), checked against
    ``config``. Every rank must have loaded the same snapshot (storage that every node sees).
    """
    snapshot = load(path)
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


def train_elastic(data: Data, cfg: DDPConfig, opts: ElasticOptions) -> ElasticResult:
    """Train ``opts.method`` (DDP) from the last snapshot (or afresh); every rank calls it.

    Chapter 5's loop (:mod:`companion.ddp.loop`) with SGD with momentum, a
    resumable sampler and snapshots taken by its ``on_step`` and
    ``on_epoch`` hooks. A chapter-9 method in ``opts.method`` (``"FSDP2"``,
    ``"ZeRO-3"``, ...) shards the model, and every rank writes its shards of
    each snapshot. ``cfg.max_steps`` stops the run after that many global
    steps as a crash would, with no snapshot at that step (a resume starts
    from the last one).
    """
    check_data(data)
    join_elastic()
    world, opts = dist.get_world_size(), opts.check()
    cfg = _resolve(cfg, opts, world)
    config = _run_config(cfg, opts, data, world)
    method = opts.method
    snapshot = _load_agreed(method.load, opts.snapshot, config)
    sampler = ResumableSampler(data.train, world, dist.get_rank(), cfg.seed)
    run = method.setup(data, cfg, opts.momentum, sampler, f"elastic {method.name}")
    scheduler = warmup_schedule(run.optimizer, opts.warmup_steps)
    first = position = 0
    if snapshot is not None:
        first, position, run.steps = method.restore(snapshot, run.net, run.optimizer, scheduler)
    sampler.set_epoch(first, position)
    resumed_from, log = run.steps, StepLog(cfg, opts, sampler, run.steps)

    def save(epoch: int, position: int) -> None:
        at = dict(epoch=epoch, position=position, step=run.steps, config=config)
        method.save(run.net, run.optimizer, scheduler, opts.snapshot, **at)

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
    return ElasticResult(records, log.losses, method.whole(run.net, run.optimizer), resumed_from)
