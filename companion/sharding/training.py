"""Every sharded method behind one call: ``(model, optimizer) = shard(method, net, ...)``.

Used in: chapter 9.

:func:`shard` wraps a freshly built model (inside a process group) in one
of :data:`METHODS`; the result is driven by the ordinary loop, unchanged:
``loss = loss_fn(model(X), y); loss.backward(); optimizer.step();
optimizer.zero_grad()``. ``"DDP"`` is torch's DDP with a plain optimizer,
the replicated baseline. :func:`full_parameters` gathers the whole
parameters of any of them, to compare with one device.
:func:`train_sharded` trains whole epochs with any of them through chapter
5's one loop (:mod:`companion.ddp.loop`), which needs no change for it.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice, check_lr, check_module
from ..core.data import Data
from ..core.precision import MathMode
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import step_for
from ..ddp.config import DDPConfig
from ..ddp.loop import setup_rank
from ..internals.naive import trainable_parameters
from ..runtime.checkpoint import unwrap
from ..runtime.epochs import Rank, train_epochs
from ..runtime.group import check_group, ddp_device_ids, rank_device
from ..study.methods import Method, per_process
from .library import fsdp2, zero_redundancy
from .scaler import ShardedScaler, check_precision
from .zero1 import Zero1
from .zero2 import Zero2
from .zero3 import Zero3

__all__ = [
    "METHODS",
    "STUDY_METHODS",
    "shard",
    "full_parameters",
    "ShardedResult",
    "train_sharded",
    "setup_sharded",
    "sharded_worker",
]

METHODS = (
    "DDP",
    "ZeRO-1",
    "ZeRO-2",
    "ZeRO-3",
    "ZeRO-3 prefetch",
    "ZeroRedundancyOptimizer",
    "FSDP2",
)


def _check_shard(method: str, mode: MathMode | None, defaults: dict) -> None:
    check_choice(method, "method", METHODS)
    check_precision(mode, method)
    _check_optimizer_options(defaults)
    if "params" in defaults and not method.startswith("ZeRO-"):
        raise ValueError(
            f"shard: params= (parameter groups) is for the hand-written stages ZeRO-1/2/3; "
            f"{method} changes or wraps the parameters, so build its optimizer over the "
            f"wrapped model's parameters yourself"
        )


def _check_method(method: str, cfg: DDPConfig) -> MathMode:
    check_choice(method, "method", METHODS)
    return check_precision(MathMode(cfg.precision, rank_device()), method)


def shard(
    method: str,
    net: nn.Module,
    optimizer_class: type = torch.optim.Adam,
    mode: MathMode | None = None,
    find_unused_parameters: bool = False,
    bucket_cap_mb: float = 25.0,
    **defaults: Any,
) -> tuple[nn.Module, Any]:
    """``net`` and its optimizer under ``method``; ``defaults`` go to ``optimizer_class``."""
    _check_shard(method, mode, defaults)
    if method == "DDP":
        ids = ddp_device_ids(next(net.parameters()).device)
        model = DDP(net, device_ids=ids, find_unused_parameters=find_unused_parameters)
        model.register_comm_hook(None, allreduce_hook)  # torch's own, in Python: countable
        return model, optimizer_class([p for _, p in trainable_parameters(net)], **defaults)
    if method == "ZeRO-1":
        return net, Zero1(net, optimizer_class, **defaults)
    if method == "ZeRO-2":
        return net, Zero2(net, optimizer_class, bucket_cap_mb=bucket_cap_mb, **defaults)
    if method.startswith("ZeRO-3"):  # bf16 cast at gather, as fsdp2's policy does
        dtype = None if mode is None else mode.dtype
        prefetch = "prefetch" in method
        return net, Zero3(net, optimizer_class, prefetch=prefetch, param_dtype=dtype, **defaults)
    if method == "ZeroRedundancyOptimizer":
        return zero_redundancy(net, optimizer_class, find_unused_parameters, **defaults)
    return fsdp2(net, optimizer_class, mode=mode, **defaults)


def _check_optimizer_options(defaults: dict) -> None:
    """``lr`` and ``momentum``, checked here rather than inside torch's optimizer."""
    if "lr" in defaults:
        check_lr(defaults["lr"])
    momentum = defaults.get("momentum", 0.0)
    if (
        isinstance(momentum, bool)
        or not isinstance(momentum, (int, float))
        or not 0 <= momentum < 1
    ):
        raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}: e.g. 0.9, or 0")


@torch.no_grad()
def full_parameters(model: nn.Module, optimizer: Any) -> torch.Tensor:
    """The trainable parameters, whole, flattened into one vector on the CPU."""
    check_module(model, "model")
    if isinstance(optimizer, Zero3):
        whole = optimizer.full_parameters()
    else:
        whole = [
            p.full_tensor() if isinstance(p, DTensor) else p.detach()
            for _, p in trainable_parameters(unwrap(model))
        ]
    return torch.cat([t.reshape(-1).cpu() for t in whole])


class ShardedResult(NamedTuple):
    """What :func:`train_sharded` returns on each rank."""

    records: list[Record]  # one per epoch on rank 0; [] on the other ranks
    params: torch.Tensor  # the final parameters, whole, flattened, on the CPU


def train_sharded(
    data: Data,
    profile: Profile | str | None = None,
    method: str = "ZeRO-3",
    momentum: float = 0.0,
    **options: Any,
) -> ShardedResult:
    """Train with ``method`` through chapter 5's loop; every rank of a group calls it.

    ``options`` are fields of :class:`~companion.ddp.config.DDPConfig`. The
    loop is :mod:`companion.ddp.loop` unchanged: ``wrap`` shards the seeded
    model and ``make_optimizer`` hands over the optimizer built with it
    (SGD, with ``momentum`` if given), whose ``step()`` does the rest.
    """
    check_choice(method, "method", METHODS)
    cfg = DDPConfig(get_profile(profile).name, **options).resolve(check_group("train_sharded")[1])
    run = setup_sharded(data, cfg, method, method, momentum)
    records = train_epochs(run)
    return ShardedResult(records, full_parameters(run.net, run.optimizer))


def setup_sharded(
    data: Data, cfg: DDPConfig, method: str, label: str, momentum: float = 0.0, **setup: Any
) -> Rank:
    """Chapter 5's :func:`~companion.ddp.loop.setup_rank` with ``method``: ``wrap`` shards
    the seeded model and ``make_optimizer`` hands over the optimizer built with it (SGD)."""
    mode = _check_method(method, cfg)
    made = {}

    def wrap(net: nn.Module) -> nn.Module:
        model, made["optimizer"] = shard(
            method,
            net,
            torch.optim.SGD,
            mode,  # bf16 or fp16: cast at gather (ZeRO-3, FSDP2)
            find_unused_parameters=cfg.find_unused_parameters,
            lr=cfg.lr,
            momentum=momentum,
        )
        return model

    def make_step(mode: MathMode):
        if mode.scaler is not None:  # fp16: a found-inf flag that every rank agrees on
            mode.scaler = ShardedScaler()
        return step_for(mode)

    hand_over = lambda params, lr: made["optimizer"]  # noqa: E731 (built by wrap)
    return setup_rank(
        data, cfg, label, wrap, make_optimizer=hand_over, make_step=make_step, **setup
    )


def sharded_worker(
    rank: int, world_size: int, data: Data, profile: Profile | str | None = None, **options: Any
) -> ShardedResult:
    """:func:`train_sharded` as a worker of :func:`~companion.runtime.launcher.launch`."""
    return train_sharded(data, profile, **options)


# Chapter 7's study cannot import this chapter (it comes first): this chapter hands it its
# methods, and `python -m companion.study` joins the tables (companion.commands).
STUDY_METHODS: dict[str, Method] = {
    "zero3": per_process(partial(sharded_worker, method="ZeRO-3"), 9, "the hand-written ZeRO-3"),
    "fsdp2": per_process(partial(sharded_worker, method="FSDP2"), 9, "torch's fully_shard"),
}
