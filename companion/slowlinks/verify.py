"""The chapter's exact claims, as workers: each method against torch's or one process.

Used in: chapter 10 (and its tests).

Chapter 9's check (:mod:`companion.sharding.verify`): chapter 6's awkward
model (tied, frozen and unused parameters, a buffer) in float64, uneven
local shares of the same global batches, each rank's loss weighed so that
the mean of the gradients is the global batch's gradient. Where the
arithmetic is the same, the results are equal bit for bit; where it is the
same in exact arithmetic, equal up to float64 rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.optim import PostLocalSGDOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.training import set_seed
from ..ddp.detectors import MistakeDetected, check_replicas_in_sync, fingerprint
from ..internals.tied_frozen_unused import TiedFrozenUnused
from ..runtime.group import ddp_device_ids, rank_device
from ..sharding.ledger import count_bytes
from ..sharding.training import full_parameters
from ..sharding.verify import _model, _share_step
from .averaging import DiLoCo, LocalSGD
from .hooks import HOOKS
from .powersgd import PowerSGDState, powersgd_hook
from .streaming import StreamingDiLoCo

__all__ = [
    "SGD",
    "hooks_worker",
    "powersgd_worker",
    "periodic_worker",
    "error_feedback_worker",
    "torch_powersgd_worker",
    "drift_worker",
    "streaming_worker",
]

SGD = {
    "SGD": (torch.optim.SGD, {"lr": 0.1}),
    "SGD momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2}),
}


def _train(model, optimizer, batches):
    device = rank_device()
    for X, y in batches:
        _share_step(model, optimizer, X.to(device), y.to(device))
    return full_parameters(model, optimizer)


def _ddp(hook, state=None):
    net = _model().to(rank_device())
    model = DDP(
        net,
        device_ids=ddp_device_ids(rank_device()),
        find_unused_parameters=True,
        bucket_cap_mb=0.001,
    )  # several buckets
    model.register_comm_hook(state, hook)
    return model, torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1)


def hooks_worker(rank: int, world_size: int, batches) -> dict[tuple[str, str], torch.Tensor]:
    """Worker: ``{(hook, "ours" or "torch"): parameters after SGD steps}`` for each of
    :data:`~.hooks.HOOKS`."""
    return {
        (name, who): _train(*_ddp(hook), batches)
        for name, pair in HOOKS.items()
        for who, hook in zip(("ours", "torch"), pair)
    }


def powersgd_worker(
    rank: int, world_size: int, batches, rank_r: int = 10**6, error_feedback: bool = True
) -> torch.Tensor:
    """Worker: the parameters after SGD steps with :func:`~.powersgd.powersgd_hook` at rank
    ``rank_r``, every matrix compressed (``min_compression_rate=0``)."""
    state = PowerSGDState(rank_r, error_feedback, min_compression_rate=0)
    return _train(*_ddp(powersgd_hook, state), batches)


def _bare(optimizer: str):
    net = _model().to(rank_device())
    cls, hp = SGD[optimizer]
    return net, cls([p for p in net.parameters() if p.requires_grad], **hp)


def periodic_worker(rank: int, world_size: int, batches, period: int = 1) -> dict:
    """Worker: local SGD with each of :data:`SGD`, DiLoCo with inner SGD and outer SGD of
    lr 1 and no momentum, and (``period > 1``) torch's ``PostLocalSGDOptimizer`` beside
    local SGD."""
    out = {}
    for optimizer in SGD:
        net, inner = _bare(optimizer)
        out["local SGD", optimizer] = _train(net, LocalSGD(inner, period), batches)
        if period > 1:  # torch warns that period 1 is DDP's job
            net, inner = _bare(optimizer)
            averager = PeriodicModelAverager(period=period, warmup_steps=period - 1)
            out["torch local SGD", optimizer] = _train(
                net, PostLocalSGDOptimizer(inner, averager), batches
            )
    net, inner = _bare("SGD")
    out["DiLoCo", "SGD"] = _train(
        net, DiLoCo(inner, period, outer_lr=1.0, outer_momentum=0.0), batches
    )
    return out


class _Linear(nn.Module):
    """``loss = sum(W * C)``: the gradient is ``C``, whatever ``W`` is."""

    def __init__(self, shape):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(shape, dtype=torch.float64))

    def forward(self, C: torch.Tensor) -> torch.Tensor:
        return (self.weight * C).sum()


def error_feedback_worker(
    rank: int,
    world_size: int,
    steps: int = 64,
    rank_r: int = 1,
    error_feedback: bool = True,
    shape=(12, 10),
) -> list[float]:
    """Worker: PowerSGD on a gradient that never changes (rank ``r``'s is a fixed random
    matrix ``C_r``); after each step, how far the mean of the updates so far is from the
    true mean gradient ``mean_r C_r``, relative to it."""
    every = torch.randn(
        world_size, *shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    mine, truth = every[rank].to(rank_device()), every.mean(0)
    model = DDP(_Linear(shape).to(rank_device()), device_ids=ddp_device_ids(rank_device()))
    model.register_comm_hook(PowerSGDState(rank_r, error_feedback), powersgd_hook)
    total, gaps = torch.zeros(shape, dtype=torch.float64), []
    for step in range(1, steps + 1):
        model(mine).backward()
        total += model.module.weight.grad.cpu()
        model.zero_grad()
        gaps.append(float((total / step - truth).norm() / truth.norm()))
    return gaps


def torch_powersgd_worker(rank: int, world_size: int, batches, rank_r: int = 1) -> dict:
    """Worker: the hook written here and torch's ``powerSGD_hook``, both at rank ``rank_r``
    with error feedback and warm start, compressing from step 3: ``{who: (parameters after
    the steps, bytes this rank sent per step after the first)}``. The model has no unused parameter:
    with ``find_unused_parameters=True`` torch's hook, which chains its collectives in
    callbacks, could post them in another order than DDP's own on some rank."""
    out = {}
    for who in ("ours", "torch"):
        if who == "ours":
            hook, state = powersgd_hook, PowerSGDState(rank_r)
        else:
            hook = torch_powersgd.powerSGD_hook
            state = torch_powersgd.PowerSGDState(None, rank_r, start_powerSGD_iter=2)
        set_seed(0)
        device = rank_device()
        net = TiedFrozenUnused(unused=False).double().to(device)
        model = DDP(net, device_ids=ddp_device_ids(device))
        model.register_comm_hook(state, hook)
        opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1)
        with _no_cuda_sync_for_cpu(device):
            _share_step(model, opt, *(t.to(device) for t in batches[0]))
            with count_bytes() as ledger:
                for X, y in batches[1:]:
                    _share_step(model, opt, X.to(device), y.to(device))
        out[who] = (full_parameters(model, opt), ledger.sent() / (len(batches) - 1))
    return out


@contextlib.contextmanager
def _no_cuda_sync_for_cpu(device: torch.device) -> Iterator[None]:
    """Inside, on a CPU rank of a machine with a GPU: ``torch.cuda.synchronize`` does nothing.
    torch's ``powerSGD_hook`` calls ``torch.cuda.synchronize(device)`` whenever CUDA is
    available, and with a CPU bucket that raises "Expected a cuda device, but got: cpu"
    (torch 2.11-2.14; pytorch/pytorch#196568 moves it to ``torch.accelerator``). Such a rank
    has no CUDA work to wait for."""
    if device.type != "cpu" or not torch.cuda.is_available():
        yield
        return
    synchronize = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None
    try:
        yield
    finally:
        torch.cuda.synchronize = synchronize


def drift_worker(rank: int, world_size: int, batches, period: int = 4) -> list[tuple]:
    """Worker: local SGD with ``period``; after each step, whether chapter 5's detector finds
    the replicas in sync, and how far apart they are (the largest difference of a parameter
    between two ranks)."""
    net, inner = _bare("SGD")
    optimizer, device, seen = LocalSGD(inner, period), rank_device(), []
    for step, (X, y) in enumerate(batches, 1):
        _share_step(net, optimizer, X.to(device), y.to(device))
        prints = [None] * world_size
        dist.all_gather_object(prints, fingerprint(net))
        flat = torch.cat([p.detach().reshape(-1) for p in optimizer.params()])
        low, high = flat.clone(), flat.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        try:
            check_replicas_in_sync(prints)
            in_sync = True
        except MistakeDetected:
            in_sync = False
        seen.append((step, in_sync, float((high - low).max())))
    return seen


def streaming_worker(
    rank: int, world_size: int, batches, period: int = 4, settings: dict | None = None
) -> dict:
    """Worker: DiLoCo and Streaming DiLoCo with each of ``settings`` (name: keywords), inner
    SGD: ``{name: (parameters after the steps, bytes this rank sent in each step)}``."""
    out, device = {}, rank_device()
    for name, options in {"DiLoCo": None, **(settings or {})}.items():
        net, inner = _bare("SGD")
        optimizer = (
            DiLoCo(inner, period) if options is None else StreamingDiLoCo(inner, period, **options)
        )
        per_step = []
        for X, y in batches:
            with count_bytes() as ledger:
                _share_step(net, optimizer, X.to(device), y.to(device))
            per_step.append(ledger.sent())
        out[name] = (full_parameters(net, optimizer), per_step)
    return out
