"""DistributedDataParallel: one training function, started from a notebook or torchrun.

Used in: chapter 5 (chapters 6 and 7 measure against it).

One process per device. Every process builds the same model and wraps it in
``DistributedDataParallel`` (DDP), which broadcasts rank 0's parameters to
all ranks once, then averages the gradients across ranks during every
backward pass, so the replicas take identical steps. Each rank reads its own
share of the data through a ``DistributedSampler``.

:func:`train_ddp` is the one training function for both ways of starting
processes. Inside a worker of :func:`~companion.runtime.launcher.launch` (see
:func:`ddp_worker`) the process group exists already and it uses it; in a
process started by ``torchrun`` it first joins the group described by the
environment variables torchrun sets (:func:`~companion.runtime.group.init_from_env`)::

    torchrun --standalone --nproc-per-node=2 -m companion.ddp --epochs 2

(the command line itself is in :mod:`companion.ddp.cli`). :class:`DDPConfig`
holds the options; the per-rank setup and the epoch loop are
:mod:`companion.ddp.loop`, which later chapters extend.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

from ..core.batches import rank_batch_size
from ..core.checks import check_data, check_not_empty
from ..core.data import Data
from ..core.lines import number_of, say
from ..core.models import get_model
from ..core.precision import MathMode, check_exact
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import flat_params, set_seed, sgd_steps
from ..runtime.checkpoint import save_checkpoint
from ..runtime.epochs import train_epochs
from ..runtime.group import init_from_env, rank_device
from ..runtime.tblog import open_writer
from .config import DDPConfig
from .detectors import (
    MistakeDetected,
    RankTrace,
    diagnose,
    gather_traces,
    track_buffers,
)
from .loop import setup_rank, wrap_ddp
from .sampling import SampledLoader, sampler_indices

__all__ = [
    "DDPResult",
    "train_ddp",
    "ddp_worker",
    "train_reference_ddp",
]


class DDPResult(NamedTuple):
    """What :func:`train_ddp` returns on each rank."""

    records: list[Record]  # one per epoch on rank 0; [] on the other ranks
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    trace: RankTrace  # this rank's evidence for companion.ddp.detectors


def _check_training_data(data: Data) -> None:
    check_data(data)
    check_not_empty(data.train, "data.train", "give training samples")


def train_ddp(data: Data, profile: Profile | str | None = None, **options) -> DDPResult:
    """Train with DDP; every rank calls it (joining torchrun's group if need be).

    ``options`` are the fields of :class:`DDPConfig`. Each rank reads
    ``per_rank_batch`` samples per step from a ``DistributedSampler``,
    reshuffled every epoch (:mod:`companion.ddp.loop`). After each epoch, on
    all ranks, a distributed evaluation of the whole test set; on rank 0
    only, a :class:`Record`, TensorBoard scalars and an atomic checkpoint.
    With ``checks``, the detectors of :mod:`companion.ddp.detectors` run at
    the end and any mistake raises.
    """
    _check_training_data(data)
    init_from_env()  # under torchrun; a no-op when the group exists (launch)
    world_size = dist.get_world_size()
    cfg = DDPConfig(get_profile(profile).name, **options).resolve(world_size)
    X, y = _first_batch(data, cfg)
    wrap = partial(wrap_ddp, find_unused_parameters=cfg.find_unused_parameters, X=X, y=y)
    run = setup_rank(data, cfg, "DDP", wrap)
    buffers = track_buffers(run.net)  # as DDP broadcast them: see check_replicas_in_sync
    _announce(cfg, world_size)
    writer, orders = open_writer(cfg.log_dir, dist.get_rank()), []

    def after_epoch(epoch: int, record: Record | None, samples: int) -> None:
        orders.append(run.train_iter.indices[:samples])  # what this rank read
        if record is not None:
            _report(record, cfg, writer, run.net)

    try:
        records = train_epochs(run, on_epoch=after_epoch)
    finally:
        if writer is not None:
            writer.close()
    traces = gather_traces(run.net, orders, buffers)
    _check(cfg, traces, len(data.train), len(orders))
    return DDPResult(records, flat_params(run.net), traces[dist.get_rank()])


def _first_batch(data: Data, cfg: DDPConfig):
    """This rank's first minibatch, on its device (for the unused-parameter check)."""
    sampler = DistributedSampler(data.train, dist.get_world_size(), dist.get_rank(), seed=cfg.seed)
    return next(iter(SampledLoader(data.train, sampler, cfg.per_rank_batch, rank_device())))


def _announce(cfg: DDPConfig, world_size: int) -> None:
    if cfg.verbose and dist.get_rank() == 0:
        say(
            f"DDP: {number_of(world_size, 'process')} "
            f"({dist.get_backend()}), model {cfg.model}, "
            f"global batch {world_size} x {cfg.per_rank_batch}, lr {cfg.lr:g}"
        )


def _check(cfg: DDPConfig, traces: list[RankTrace], n: int, epochs: int) -> None:
    """Run the detectors (if ``cfg.checks``) and raise on any mistake."""
    if not cfg.checks:
        return
    if problems := diagnose(traces, n):
        raise MistakeDetected("; ".join(problems))
    if cfg.verbose and dist.get_rank() == 0:
        order = ", a new order every epoch" if epochs > 1 else ""
        say(f"detectors: replicas identical, shares disjoint{order}")


def _report(record: Record, cfg: DDPConfig, writer, net) -> None:
    """Rank 0's duties after an epoch: TensorBoard, checkpoint, a printed line."""
    if writer is not None:
        step = record.epoch
        writer.add_scalar("train/loss", record.train_loss, step)
        writer.add_scalar("test/accuracy", record.test_acc, step)
        writer.add_scalar("time/seconds_per_epoch", record.sec_per_epoch, step)
        writer.add_scalar("time/samples_per_second", record.samples_per_sec, step)
        writer.flush()
    if cfg.checkpoint is not None:
        save_checkpoint(net, cfg.checkpoint)  # the unwrapped model, atomically
    if cfg.verbose:
        say(
            f"epoch {record.epoch}/{cfg.epochs}: train loss {record.train_loss:.4f}, "
            f"test accuracy {record.test_acc:.4f}, {record.sec_per_epoch:.2f} s, "
            f"{record.samples_per_sec:,.0f} samples/s"
        )


def ddp_worker(
    rank: int,
    world_size: int,
    data: Data,
    profile: Profile | str | None = None,
    **options,
) -> DDPResult:
    """:func:`train_ddp` as a worker of :func:`~companion.runtime.launcher.launch`."""
    return train_ddp(data, profile, **options)


def train_reference_ddp(
    world_size: int,
    data: Data,
    profile: Profile | str | None = None,
    *,
    global_batch: int,
    lr: float,
    steps: int,
    model: str | None = None,
    seed: int = 0,
    precision: str = "fp32",
    clip: float | None = None,
) -> torch.Tensor:
    """One process's SGD on the global minibatches that DDP's ``world_size`` ranks read.

    Step ``k`` concatenates, in rank order, minibatch ``k`` of every rank's
    ``DistributedSampler`` share (same seed and epochs as :func:`train_ddp`)
    and takes one ordinary step on its mean loss. Returns the flat parameters.
    ``precision`` is ``"fp32"`` or ``"fp64"``, the workers' (float64 for a
    verdict that does not depend on this process's number of threads); ``clip``
    as in :class:`DDPConfig`.
    """
    check_data(data)
    mode = MathMode(check_exact(precision, "train_reference_ddp"), "cpu")
    batch = rank_batch_size(global_batch, world_size)
    X_all, y_all = data.train.tensors()

    def global_batches():
        for epoch in range(2**31):
            shares = [
                torch.tensor(s) for s in sampler_indices(data.train, world_size, epoch, seed=seed)
            ]
            for start in range(0, len(shares[0]), batch):
                idx = torch.cat([s[start : start + batch] for s in shares])
                yield X_all[idx], y_all[idx]

    set_seed(seed)
    net = mode.place(get_model(model or get_profile(profile).processes.model), "cpu")
    return sgd_steps(net, global_batches(), lr, steps, clip)
