"""One process per device: the per-rank setup that later chapters extend.

Used in: chapter 5 (chapters 6 and 8 reuse it, and chapter 9 plugs into it).

Every distributed trainer of the book is this module plus what its chapter
adds, passed in as a function, never copied:

* :func:`setup_rank` builds what one rank trains with, a
  :class:`~companion.runtime.epochs.Rank`: its device, its
  ``DistributedSampler`` share and loader, the seeded model (warmed up on a
  copy), the precision (:class:`~companion.core.precision.MathMode`), the
  wrapped model, the optimizer and a distributed evaluation;
* chapter 3's :func:`~companion.runtime.epochs.train_epochs` runs the epochs.

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

import warnings
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from ..core.batches import check_batch_fits
from ..core.checks import check_data, check_lr
from ..core.clip import clip_before_step
from ..core.data import Data
from ..core.devices import model_device
from ..core.models import check_parameters, get_model
from ..core.precision import MathMode
from ..core.training import set_seed, step_for, warm_up
from ..runtime.epochs import Rank
from ..runtime.group import check_group, ddp_device_ids, rank_device
from .config import DDPConfig
from .sampling import SampledLoader, evaluate_distributed
from .unused import check_unused_parameters

__all__ = ["sgd", "wrap_ddp", "setup_rank"]


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
    check_batch_fits(cfg.per_rank_batch, len(sampler), world_size)
    train_iter = SampledLoader(data.train, sampler, cfg.per_rank_batch, device)
    mode = MathMode(cfg.precision, device, cfg.channels_last)
    set_seed(cfg.seed)
    net = mode.place(get_model(cfg.model), device)
    step = quiet_nominal_strides(net, mode, make_step(mode))
    warm_up(net, *next(iter(train_iter)), cfg.lr)  # on a copy: one-off costs untimed
    net = wrap(net)
    optimizer = make_optimizer(net.parameters(), cfg.lr)
    if cfg.clip is not None:
        clip_before_step(optimizer, cfg.clip)  # after DDP's averaging: the global norm
    return Rank(
        method=method,
        device=device,
        train_iter=train_iter,
        net=net,
        optimizer=optimizer,
        evaluate=lambda model: evaluate_distributed(model, data.test, device),
        epochs=cfg.epochs,
        labels=dict(profile=cfg.profile, model=cfg.model, dataset=data.name, precision=str(mode)),
        step=step,
        max_steps=cfg.max_steps,
        sampler=sampler,
    )


def quiet_nominal_strides(net: nn.Module, mode: MathMode, step: Callable) -> Callable:
    """``step``, silencing DDP's "Grad strides do not match bucket view strides" while it runs
    when ``net`` is channels-last and has a 4-D weight with a size-1 dimension; else ``step``.

    Such a weight (a one-channel input's convolution, a 1x1 kernel) has two
    stride tuples for one memory order, and on a GPU the gradient may come
    back with the other one: DDP then warns once that may impair performance,
    though nothing is copied differently (pytorch/pytorch#47163; seen with
    ResNet-18's first convolution on an H200). Other models keep the warning.
    """
    nominal = any(p.dim() == 4 and 1 in p.shape[1:] for p in net.parameters())
    if not (mode.channels_last and nominal):
        return step

    def quiet_step(*args, **kwargs):  # the filter lasts the step: the process keeps its own
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Grad strides do not match bucket view")
            return step(*args, **kwargs)

    return quiet_step


def _check_setup(data: Data, cfg: DDPConfig) -> tuple[int, int]:
    check_data(data)
    if not isinstance(cfg, DDPConfig) or cfg.per_rank_batch is None:
        raise TypeError(
            f"cfg must be a resolved DDPConfig, got {cfg!r}: pass cfg.resolve(world_size)"
        )
    return check_group("setup_rank")
