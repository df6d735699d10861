"""DistributedDataParallel: one training function, started from a notebook or torchrun.

Used in: chapter 5 (chapters 6 and 7 measure against it).

One process per device. Every process builds the same model and wraps it in
``DistributedDataParallel`` (DDP), which broadcasts rank 0's parameters to
all ranks once, then averages the gradients across ranks during every
backward pass, so the replicas take identical steps. Each rank reads its own
share of the data through a ``DistributedSampler``.

:func:`train_ddp` is the one training function for both ways of starting
processes. Inside a worker of :func:`~companion.launch.launch` (see
:func:`ddp_worker`) the process group exists already and it uses it; in a
process started by ``torchrun`` it first joins the group described by the
environment variables torchrun sets (:func:`init_from_env`)::

    torchrun --standalone --nproc-per-node=2 -m companion.ddp --epochs 2

(the command line itself is in :mod:`companion.ddp_cli`).
"""

from __future__ import annotations

import os
import sys
from functools import partial
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from .checkpoint import save_checkpoint
from .data import Data
from .ddp_cli import init_from_env
from .detectors import MistakeDetected, RankTrace, diagnose, gather_traces
from .devices import hardware_label
from .launch import launch, rank_device
from .models import get_model
from .partition import local_batch_size
from .profiles import get_profile
from .results import Record
from .sampling import SampledLoader, evaluate_distributed, sampler_indices
from .tblog import open_writer
from .train import Timer, set_seed, train_step, warm_up

__all__ = [
    "linear_lr",
    "DDPResult",
    "train_ddp",
    "ddp_worker",
    "train_ddp_distributed",
    "train_reference_ddp",
]


def linear_lr(lr: float, world_size: int) -> float:
    """The linear scaling rule: ``lr * world_size``.

    Use it when each rank keeps its per-rank batch as the world grows: the
    global batch is then ``world_size`` times larger, each step averages
    ``world_size`` times more samples, and a proportionally larger step keeps
    the progress per sample about the same (Goyal et al., 2017; large
    factors need a warm-up, chapter 7). With a fixed global batch, keep ``lr``.
    """
    if not lr > 0 or world_size < 1:
        raise ValueError(f"need lr > 0 and world_size >= 1, got {lr}, {world_size}")
    return lr * world_size


class DDPResult(NamedTuple):
    """What :func:`train_ddp` returns on each rank."""

    records: list[Record]  # one per epoch on rank 0; [] on the other ranks
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    trace: RankTrace  # this rank's evidence for companion.detectors


def _rank_batch(global_batch, per_rank_batch, world_size, default, **sizes) -> int:
    """The per-rank batch; ``ValueError`` for sizes that are not positive."""
    for name, value in dict(sizes, per_rank_batch=per_rank_batch).items():
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive (or None), got {value}")
    if global_batch is not None and per_rank_batch is not None:
        raise ValueError("give global_batch or per_rank_batch, not both")
    if per_rank_batch is not None:
        return per_rank_batch
    return local_batch_size(global_batch or default, world_size)


def train_ddp(
    data: Data,
    profile_name: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    per_rank_batch: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    scale_lr: bool = False,
    log_dir: str | None = None,
    checkpoint: str | None = None,
    seed: int = 0,
    max_steps: int | None = None,
    checks: bool = True,
    verbose: bool = False,
) -> DDPResult:
    """Train with DDP; every rank calls it (joining torchrun's group if need be).

    Each rank reads ``global_batch / world_size`` samples per step (or
    ``per_rank_batch``) from a ``DistributedSampler`` reshuffled with
    ``set_epoch`` every epoch; ``scale_lr`` multiplies ``lr`` by the world
    size (:func:`linear_lr`). After each epoch, on all ranks, a distributed
    evaluation of the whole test set; on rank 0 only, a :class:`Record`, the
    TensorBoard scalars (``log_dir``) and an atomic checkpoint of the
    unwrapped model (``checkpoint``). With ``checks``, the detectors of
    :mod:`companion.detectors` run on every rank's trace at the end and any
    mistake raises. Unset sizes come from the profile; ``max_steps`` stops early.
    """
    init_from_env()  # under torchrun; a no-op when the group exists (launch)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    profile = get_profile(profile_name)
    batch = _rank_batch(
        global_batch,
        per_rank_batch,
        world_size,
        profile.batch_size,
        epochs=epochs,
        lr=lr,
        max_steps=max_steps,
    )
    model, epochs = model or profile.model, epochs or profile.epochs
    lr = linear_lr(lr or profile.lr, world_size) if scale_lr else lr or profile.lr
    device = rank_device(int(os.environ.get("LOCAL_RANK", rank)), dist.get_backend())
    sampler = DistributedSampler(data.train, world_size, rank, shuffle=True, seed=seed)
    train_iter = SampledLoader(data.train, sampler, batch, device)
    set_seed(seed)
    net = get_model(model).to(device)
    warm_up(net, *next(iter(train_iter)), lr)  # on a copy: one-off costs untimed
    net = DDP(net, device_ids=[device] if device.type == "cuda" else None)
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=lr)
    epoch_record = partial(
        Record,
        "DDP",
        world_size,
        hardware=hardware_label(),
        profile=profile.name,
        model=model,
        dataset=data.name,
    )
    if verbose:
        print(
            f"DDP: {world_size} processes ({dist.get_backend()}), model {model}, "
            f"global batch {world_size} x {batch}, lr {lr:g}",
            flush=True,
        )
    writer, records, orders, steps = open_writer(log_dir, rank), [], [], 0
    try:
        for epoch in range(epochs):
            sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on all ranks
            totals = torch.zeros(2, dtype=torch.float64, device=device)
            dist.barrier()
            with Timer(device) as timer:
                for X, y in train_iter:
                    totals[0] += train_step(net, X, y, loss_fn, optimizer) * len(y)
                    totals[1] += len(y)
                    steps += 1
                    if steps == max_steps:
                        break
            orders.append(train_iter.indices[: int(totals[1])])
            dist.all_reduce(totals)  # loss sum and samples, over all ranks
            test_acc = evaluate_distributed(net.module, data.test, device)
            if rank == 0:
                loss_sum, n = totals.tolist()
                records.append(
                    epoch_record(
                        epoch=epoch + 1,
                        test_acc=test_acc,
                        sec_per_epoch=timer.seconds,
                        samples_per_sec=n / timer.seconds,
                        train_loss=loss_sum / n,
                    )
                )
                _report(records[-1], epochs, writer, checkpoint, net, verbose)
            if steps == max_steps:
                break
    finally:
        if writer is not None:
            writer.close()
    traces = gather_traces(net, orders)
    if checks and (problems := diagnose(traces, len(data.train))):
        raise MistakeDetected("; ".join(problems))
    if checks and verbose:
        order = ", a new order every epoch" if len(orders) > 1 else ""
        print(f"detectors: replicas identical, shares disjoint{order}", flush=True)
    params = torch.cat([p.detach().reshape(-1).cpu() for p in net.parameters()])
    return DDPResult(records, params, traces[rank])


def _report(record: Record, epochs: int, writer, checkpoint, net, verbose) -> None:
    """Rank 0's duties after an epoch: TensorBoard, checkpoint, a printed line."""
    if writer is not None:
        step = record.epoch
        writer.add_scalar("train/loss", record.train_loss, step)
        writer.add_scalar("test/accuracy", record.test_acc, step)
        writer.add_scalar("time/seconds_per_epoch", record.sec_per_epoch, step)
        writer.add_scalar("time/samples_per_second", record.samples_per_sec, step)
        writer.flush()
    if checkpoint is not None:
        save_checkpoint(net, checkpoint)  # the unwrapped model, atomically
    if verbose:
        print(
            f"epoch {record.epoch}/{epochs}: train loss {record.train_loss:.4f}, "
            f"test accuracy {record.test_acc:.4f}, {record.sec_per_epoch:.2f} s, "
            f"{record.samples_per_sec:,.0f} samples/s",
            flush=True,
        )


def ddp_worker(
    rank: int, world_size: int, data: Data, profile_name: str | None = None, **kwargs
) -> DDPResult:
    """:func:`train_ddp` as a worker of :func:`~companion.launch.launch`."""
    return train_ddp(data, profile_name, **kwargs)


def train_ddp_distributed(
    world_size: int,
    data: Data,
    profile_name: str | None = None,
    timeout: float = 1800.0,
    **kwargs,
) -> list[Record]:
    """:func:`train_ddp` on ``world_size`` processes (``launch``); rank 0's records."""
    results = launch(
        ddp_worker, world_size, data, profile_name, timeout=timeout, **kwargs
    )
    return results[0].records


def train_reference_ddp(
    world_size: int,
    data: Data,
    profile_name: str | None = None,
    *,
    global_batch: int,
    lr: float,
    steps: int,
    model: str | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """One process's SGD on the global minibatches that DDP's ``world_size`` ranks read.

    Step ``k`` concatenates, in rank order, minibatch ``k`` of every rank's
    ``DistributedSampler`` share (same seed and epochs as :func:`train_ddp`)
    and takes one ordinary step on its mean loss. Returns the flat parameters.
    """
    profile = get_profile(profile_name)
    batch = local_batch_size(global_batch, world_size)
    X_all, y_all = data.train.tensors()
    set_seed(seed)
    net = get_model(model or profile.model)
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=lr)
    done, epoch = 0, 0
    while done < steps:
        shares = sampler_indices(data.train, world_size, epoch, seed=seed)
        shares = [torch.tensor(share) for share in shares]
        for start in range(0, len(shares[0]), batch):
            idx = torch.cat([s[start : start + batch] for s in shares])
            train_step(net, X_all[idx], y_all[idx], loss_fn, optimizer)
            done += 1
            if done == steps:
                break
        epoch += 1
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


if __name__ == "__main__":  # torchrun --standalone --nproc-per-node=N -m companion.ddp
    from companion.ddp_cli import main

    sys.exit(main())
