"""One process per device: the per-rank setup and the epoch loop that later chapters extend.

Used in: chapter 5 (chapters 3, 6 and 8 reuse it, and chapter 9 plugs into it).

Every distributed trainer of the book is this module plus what its chapter
adds, passed in as a function, never copied:

* :func:`setup_rank` builds what one rank trains with: its device, its
  ``DistributedSampler`` share and loader, the seeded model (warmed up on a
  copy), the precision (:class:`~companion.core.precision.MathMode`), the
  wrapped model and the optimizer;
* :func:`train_epochs` runs the epochs: a fresh shuffle each, a timed pass
  of chapter 1's ``train_epoch`` over the rank's share (any ``step``,
  ``max_steps``, an ``on_step(step, loss, samples)`` hook; the loss sum
  stays on the device), a distributed evaluation, one :class:`Record`
  built by :func:`epoch_record`, and an ``on_epoch`` hook.

The extension points are the arguments of :func:`setup_rank`. ``wrap``
turns the seeded model into the data-parallel one: torch's DDP (chapter 5,
:func:`wrap_ddp`), a rebuilt DDP (chapter 6), or a sharded wrapper
(chapter 9's ZeRO-3/FSDP). ``make_optimizer(parameters, lr)`` builds the
optimizer: plain SGD, SGD with momentum (chapter 8) or a sharded optimizer
(chapter 9's ZeRO-1/2). ``make_step(mode)`` gives the training step in the
run's precision (chapter 6's gradient accumulation). A new method passes
these; it never needs a loop of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from ..core.data import Data
from ..core.devices import hardware_label, model_device
from ..core.checks import check_data, check_lr
from ..core.models import check_parameters, get_model
from ..core.precision import MathMode
from ..core.results import Record
from ..core.training import Timer, set_seed, step_for, train_epoch, train_step, warm_up
from ..runtime.group import check_group, ddp_device_ids, rank_device
from .config import DDPConfig
from .sampling import SampledLoader, evaluate_distributed
from .unused import check_unused_parameters

__all__ = ["Rank", "sgd", "wrap_ddp", "setup_rank", "epoch_record", "train_epochs"]

OnStep = Callable[[int, torch.Tensor, int], None]  # (global step, loss sum, samples) on this rank


@dataclass
class Rank:
    """What one rank trains with (built by :func:`setup_rank`)."""

    cfg: DDPConfig
    method: str  # the Record's method name
    device: torch.device
    sampler: DistributedSampler
    train_iter: SampledLoader
    net: nn.Module  # the wrapped model
    mode: MathMode
    optimizer: torch.optim.Optimizer
    step: Callable = train_step
    steps: int = 0  # global steps taken so far


def sgd(parameters: Iterable, lr: float) -> torch.optim.Optimizer:
    """The default ``make_optimizer``: plain minibatch SGD."""
    return torch.optim.SGD(check_parameters(parameters), lr=check_lr(lr))  # torch takes nan


def wrap_ddp(net: nn.Module, find_unused_parameters: bool = False, X=None, y=None) -> DDP:
    """``net`` in torch's DDP; without ``find_unused_parameters`` an unused one raises now."""
    check_group("wrap_ddp")
    if not find_unused_parameters and X is not None:
        check_unused_parameters(net, X, y)
    ids = ddp_device_ids(model_device(net))
    return DDP(net, device_ids=ids, find_unused_parameters=find_unused_parameters)


def setup_rank(
    data: Data,
    cfg: DDPConfig,
    method: str,
    wrap: Callable[[nn.Module], nn.Module],
    make_optimizer: Callable[..., torch.optim.Optimizer] = sgd,
    make_step: Callable[[MathMode], Callable] = step_for,
    sampler: DistributedSampler | None = None,
) -> Rank:
    """This rank's device, data share, seeded and wrapped model, precision and optimizer.

    ``cfg`` is resolved (:meth:`DDPConfig.resolve`). ``make_step(mode)``
    gives the training step in the run's precision (default: chapter 1's
    step, under autocast unless fp32); ``sampler`` defaults to a
    ``DistributedSampler`` seeded with ``cfg.seed``.
    """
    rank, world_size = _check_setup(data, cfg)
    device = rank_device()
    sampler = sampler or DistributedSampler(data.train, world_size, rank, seed=cfg.seed)
    train_iter = SampledLoader(data.train, sampler, cfg.per_rank_batch, device)
    mode = MathMode(cfg.precision, device, cfg.channels_last)
    set_seed(cfg.seed)
    net = mode.place(get_model(cfg.model), device)
    warm_up(net, *next(iter(train_iter)), cfg.lr)  # on a copy: one-off costs untimed
    net = wrap(net)
    optimizer = make_optimizer(net.parameters(), cfg.lr)
    return Rank(cfg, method, device, sampler, train_iter, net, mode, optimizer, make_step(mode))


def _check_setup(data: Data, cfg: DDPConfig) -> tuple[int, int]:
    check_data(data)
    if not isinstance(cfg, DDPConfig) or cfg.per_rank_batch is None:
        raise TypeError(f"cfg must be a resolved DDPConfig, got {cfg!r}: pass cfg.resolve(world_size)")
    return check_group("setup_rank")


def epoch_record(
    run: Rank, data: Data, epoch: int, totals: torch.Tensor, seconds: float, test_acc: float
) -> Record:
    """The one way an epoch's :class:`Record` is built; ``totals`` summed over the ranks."""
    loss_sum, n = totals.tolist()
    return Record(
        method=run.method,
        n_devices=dist.get_world_size(),
        epoch=epoch,
        test_acc=test_acc,
        sec_per_epoch=seconds,
        samples_per_sec=n / seconds,
        train_loss=loss_sum / max(n, 1),
        hardware=hardware_label(),
        profile=run.cfg.profile,
        model=run.cfg.model,
        dataset=data.name,
        precision=str(run.mode),
    )


def train_epochs(
    run: Rank,
    data: Data,
    on_step: OnStep | None = None,
    on_epoch: Callable[[int, Record | None, int], None] | None = None,
    first_epoch: int = 0,
) -> list[Record]:
    """Epochs from ``first_epoch`` on; one :class:`Record` per epoch on rank 0.

    The sampler is already set to ``first_epoch`` (``DistributedSampler``
    starts at epoch 0); each later epoch gets ``set_epoch``.
    ``on_epoch(epoch, record, samples)`` runs on every rank after each
    epoch's evaluation (``record`` is ``None`` except on rank 0; ``samples``
    this rank read). A run stops at ``cfg.max_steps`` global steps.
    """
    loss_fn, records = nn.CrossEntropyLoss(), []
    for epoch in range(first_epoch, run.cfg.epochs):
        if epoch > first_epoch:  # the first: as set up (chapter 8 may resume mid-epoch)
            run.sampler.set_epoch(epoch)  # a new shuffle, the same on all ranks
        dist.barrier()
        before, done = run.steps, 0
        left = None if run.cfg.max_steps is None else run.cfg.max_steps - before

        def counted(k: int, loss: torch.Tensor, samples: int) -> None:
            nonlocal done
            done = k
            if on_step is not None:
                on_step(before + k, loss, samples)

        with Timer(run.device) as timer:
            loss, samples = train_epoch(
                run.net, run.train_iter, loss_fn, run.optimizer, run.device, counted, run.step, left
            )
        run.steps = before + done
        totals = torch.tensor([loss * samples, samples], dtype=torch.float64, device=run.device)
        dist.all_reduce(totals)  # loss sum and samples, over all ranks
        test_acc = evaluate_distributed(unwrap(run.net), data.test, run.device)
        record = epoch_record(run, data, epoch + 1, totals, timer.seconds, test_acc)
        if dist.get_rank() == 0:
            records.append(record)
        if on_epoch is not None:
            on_epoch(epoch, record if dist.get_rank() == 0 else None, samples)
        if run.steps == run.cfg.max_steps:
            break
    return records


def unwrap(net: nn.Module) -> nn.Module:
    """The model inside a data-parallel wrapper (evaluation stays local)."""
    return getattr(net, "module", net)
