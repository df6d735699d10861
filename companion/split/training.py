"""Training by hand on several devices in one process: chapter 1's loop, split.

Used in: chapter 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..core.devices import gpu_indices, synchronize_all
from ..core.precision import check_fp32
from ..core.profiles import Profile, get_profile
from ..core.results import Record, record_maker
from ..core.training import check_training, evaluate_accuracy
from .naive import copy_replicas, train_batch

__all__ = ["train"]


def train(
    net: nn.Module,
    train_iter,
    test_iter,
    devices: Sequence[torch.device],
    *,
    epochs: int,
    lr: float,
    step: Callable[..., torch.Tensor] = train_batch,
    method: str = "split by hand",
    profile: Profile | str | None = None,
    model_name: str = "",
    dataset: str = "",
    warmup_steps: int = 3,
    precision: str | None = None,
    lr_schedule: Callable[[int], float] | None = None,
) -> list[Record]:
    """Train ``net`` with ``step`` on ``devices``; one :class:`Record` per epoch.

    ``step`` is :func:`train_batch` or ``companion.split.fused.train_batch_foreach``.
    Each epoch is timed whole with every device synchronised (evaluation, on
    replica 0, excluded), after ``warmup_steps`` steps on throw-away replicas.
    ``lr_schedule(step)`` is the rate of step ``step`` (0, 1, ...) if given.
    The split steps compute in fp32 only: ``precision`` (default ``fp32``,
    whatever the profile's) must be ``fp32``. At the end ``net`` holds replica 0's
    parameters and buffers.
    """
    check_training(epochs, lr, train_iter, test_iter)
    profile = get_profile(profile)
    precision = check_fp32(precision or "fp32", "split.train")
    devices = [torch.device(d) for d in devices]
    net.train()
    if warmup_steps:
        X, y = next(iter(train_iter))
        with torch.random.fork_rng(devices=gpu_indices(devices)):
            shadows = copy_replicas(net, devices)
            for _ in range(warmup_steps):
                step(X, y, shadows, devices, lr)
    replicas, rate = copy_replicas(net, devices), lr_schedule or (lambda k: lr)
    labels = dict(profile=profile.name, model=model_name, dataset=dataset, precision=precision)
    virtual = len(set(devices)) < len(devices)
    record = record_maker(method, len(devices), virtual=virtual, **labels)
    records, k = [], 0
    for epoch in range(1, epochs + 1):
        loss_sum, n = torch.zeros((), device=devices[0]), 0
        synchronize_all(devices)
        start = time.perf_counter()
        for X, y in train_iter:
            loss_sum += step(X, y, replicas, devices, rate(k)) * len(y)
            n, k = n + len(y), k + 1
        synchronize_all(devices)
        seconds = time.perf_counter() - start
        acc = evaluate_accuracy(replicas[0], test_iter, devices[0])
        records.append(record(epoch, acc, seconds=seconds, samples=n, loss=float(loss_sum) / n))
    net.load_state_dict(replicas[0].state_dict())
    return records
