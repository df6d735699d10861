"""Training with the rebuilt DDPs: one step (with gradient accumulation) and whole epochs.

Used in: chapter 6.

:func:`wrap` wraps a model in one of the chapter's steps or in torch's own
DDP, by name (:data:`VARIANTS`). :func:`accumulation_step` is one optimizer
step over ``micro_batches`` slices of a minibatch, the first ones inside
``no_sync()`` when asked; :func:`train_internals` is chapter 5's loop
(:mod:`companion.ddp.loop`) with one of the chapter's wrappers in place of
torch's DDP, so the two compare line for line and with ``train_reference_ddp``.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice, check_data, check_not_empty, check_step
from ..core.data import Data
from ..core.precision import MathMode
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import Timer, flat_params, set_seed
from ..ddp.config import DDPConfig
from ..ddp.loop import setup_rank
from ..runtime.epochs import train_epochs
from ..runtime.group import ddp_device_ids, rank_device
from .buckets import BucketedDDP
from .hooks import HookedDDP
from .naive import NaiveDDP
from .sweep import get_bench_model

__all__ = [
    "VARIANTS",
    "wrap",
    "accumulation_step",
    "InternalsResult",
    "train_internals",
    "internals_worker",
    "time_accumulation",
]

VARIANTS = ("NaiveDDP", "HookedDDP", "BucketedDDP", "torch DDP")


def wrap(net: nn.Module, variant: str, bucket_cap_mb: float = 25.0, **options) -> nn.Module:
    """``net`` wrapped in a variant of :data:`VARIANTS` (inside a process group).

    ``bucket_cap_mb`` goes to the bucketed ones (``BucketedDDP``, torch's
    DDP); ``options`` to the chapter's classes (``weigh_by_samples``, and
    ``find_unused_parameters`` for ``BucketedDDP`` and torch's DDP).
    """
    check_choice(variant, "variant", VARIANTS)
    if variant == "torch DDP":
        ids = ddp_device_ids(next(net.parameters()).device)
        return DDP(net, device_ids=ids, bucket_cap_mb=bucket_cap_mb, **options)
    if variant == "BucketedDDP":
        return BucketedDDP(net, bucket_cap_mb, **options)
    return {"NaiveDDP": NaiveDDP, "HookedDDP": HookedDDP}[variant](net, **options)


def accumulation_step(
    net: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: int = 1,
    no_sync: bool = True,
    mode: MathMode | None = None,
) -> torch.Tensor:
    """One step over ``micro_batches`` slices of ``(X, y)``; returns the mean loss.

    Each slice's loss is weighed by its share of the samples, so the summed
    gradients are those of the mean loss over ``X``. With ``no_sync`` the
    first slices run inside ``net.no_sync()`` and only the last one
    communicates; without it every slice all-reduces its gradients.
    ``mode`` (chapter 1's math precision; ``None``: plain fp32) runs forward
    and loss under autocast and, for fp16, scales the loss: the buckets then
    average scaled gradients, which the scaler unscales in its step.
    """
    check_step(net, X, y, loss_fn, micro_batches)
    optimizer.zero_grad(set_to_none=True)
    pieces = list(zip(X.tensor_split(micro_batches), y.tensor_split(micro_batches)))
    total = torch.zeros((), device=X.device)
    mode = mode or MathMode("fp32", X.device)
    finish = getattr(net, "finish", lambda: None)  # torch's DDP has none
    for i, (X_i, y_i) in enumerate(pieces):
        local = no_sync and i < len(pieces) - 1
        with net.no_sync() if local else nullcontext():
            with mode.autocast():
                loss = loss_fn(net(mode.layout(X_i)), y_i) * (len(y_i) / len(y))
            mode.backward(loss)  # the wrapper's finish() runs at its end ...
        finish()  # ... or here, with finish_in_backward=False (a second call does nothing)
        total += loss.detach().float()
    mode.step(optimizer)
    return total


class InternalsResult(NamedTuple):
    """What :func:`train_internals` returns on each rank."""

    records: list[Record]  # one per epoch on rank 0; [] on the other ranks
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    allreduces: int  # gradient all-reduces this rank launched (None for torch's DDP)


def _check_internals(data: Data, variant: str) -> None:
    check_data(data)
    check_choice(variant, "variant", VARIANTS)
    check_not_empty(data.train, "data.train", "give training samples")


def train_internals(
    data: Data,
    profile: Profile | str | None = None,
    variant: str = "BucketedDDP",
    *,
    bucket_cap_mb: float = 25.0,
    micro_batches: int = 1,
    no_sync: bool = True,
    **options,
) -> InternalsResult:
    """Train with ``variant``; every rank of a process group calls it.

    ``options`` are fields of chapter 5's
    :class:`~companion.ddp.config.DDPConfig` (model, batch sizes, epochs, lr,
    seed, max_steps, precision, channels_last: the profile's by default, so
    the ``gpu`` profile runs chapter 1's fast baseline). Chapter 5's loop
    (:mod:`companion.ddp.loop`), with the variant as its wrapper and
    :func:`accumulation_step` as its step.
    """
    _check_internals(data, variant)
    cfg = DDPConfig(get_profile(profile).name, **options).resolve(dist.get_world_size())

    def step(mode: MathMode):
        return partial(accumulation_step, micro_batches=micro_batches, no_sync=no_sync, mode=mode)

    wrapper = partial(wrap, variant=variant, bucket_cap_mb=bucket_cap_mb, **_unused(variant, cfg))
    run = setup_rank(data, cfg, variant, wrapper, make_step=step)
    records = train_epochs(run)
    return InternalsResult(records, flat_params(run.net), getattr(run.net, "allreduces", None))


def _unused(variant: str, cfg: DDPConfig) -> dict:
    """``find_unused_parameters`` for the wrapper, where the config asks for it."""
    if not cfg.find_unused_parameters:
        return {}
    if variant not in ("BucketedDDP", "torch DDP"):
        raise ValueError(
            f"find_unused_parameters=True needs variant 'BucketedDDP' or 'torch DDP', got "
            f"{variant!r}: {variant} raises on an unused parameter (or let forward use them all)"
        )
    return {"find_unused_parameters": True}


def internals_worker(
    rank: int, world_size: int, data: Data, profile: Profile | str | None = None, **options
) -> InternalsResult:
    """:func:`train_internals` as a worker of :func:`~companion.runtime.launcher.launch`."""
    return train_internals(data, profile, **options)


def time_accumulation(
    rank: int,
    world_size: int,
    model: str = "lenet",
    batch: int = 64,
    micro_batches: int = 4,
    steps: int = 10,
    bucket_cap_mb: float = 25.0,
) -> dict[bool, tuple[float, float]]:
    """Worker: ``{no_sync: (seconds per step, all-reduces per step)}`` for BucketedDDP.

    ``model`` is ``"mlp"`` or a name of ``companion.core.MODELS``.

    Each step accumulates ``micro_batches`` slices of one random batch of
    ``batch`` samples per rank. Both ways run in alternation, after a warm-up;
    a step's time is the slowest rank's median.
    """
    device = rank_device()
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    runs = {}
    for no_sync in (True, False):
        set_seed(0)
        net = wrap(get_bench_model(model).to(device), "BucketedDDP", bucket_cap_mb)
        runs[no_sync] = (net, torch.optim.SGD(net.parameters(), lr=0.01))
    times = torch.zeros(steps, 2, dtype=torch.float64)
    for i in range(-2, steps):  # two untimed steps first
        for j, (no_sync, (net, opt)) in enumerate(runs.items()):
            dist.barrier()
            with Timer(device) as timer:
                accumulation_step(
                    net,
                    X,
                    y,
                    nn.CrossEntropyLoss(),
                    opt,
                    micro_batches=micro_batches,
                    no_sync=no_sync,
                )
            if i >= 0:
                times[i, j] = timer.seconds
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    medians = times.cpu().median(dim=0).values.tolist()
    return {
        no_sync: (medians[j], net.allreduces / (steps + 2))
        for j, (no_sync, (net, _)) in enumerate(runs.items())
    }
