"""Training by hand on several devices in one process: chapter 1's loop, split.

Used in: chapter 2.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch
from torch import nn

from ..core.devices import hardware_label, synchronize_all
from ..core.profiles import Profile, get_profile
from ..core.results import Record
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
) -> list[Record]:
    """Train ``net`` with ``step`` on ``devices``; one :class:`Record` per epoch.

    ``step`` is :func:`train_batch` or ``companion.split.fused.train_batch_foreach``.
    Each epoch is timed whole with every device synchronised (evaluation, on
    replica 0, excluded), after ``warmup_steps`` steps on throw-away replicas.
    At the end ``net`` holds replica 0's parameters and buffers.
    """
    check_training(epochs, lr, train_iter, test_iter)
    profile = get_profile(profile)
    devices = [torch.device(d) for d in devices]
    net.train()
    if warmup_steps:
        X, y = next(iter(train_iter))
        gpus = [d.index or 0 for d in devices if d.type == "cuda"]
        with torch.random.fork_rng(devices=gpus):
            shadows = copy_replicas(net, devices)
            for _ in range(warmup_steps):
                step(X, y, shadows, devices, lr)
    replicas = copy_replicas(net, devices)
    records, label = [], hardware_label()
    for epoch in range(1, epochs + 1):
        loss_sum, n = torch.zeros((), device=devices[0]), 0
        synchronize_all(devices)
        start = time.perf_counter()
        for X, y in train_iter:
            loss_sum += step(X, y, replicas, devices, lr) * len(y)
            n += len(y)
        synchronize_all(devices)
        seconds = time.perf_counter() - start
        test_acc = evaluate_accuracy(replicas[0], test_iter, devices[0])
        records.append(
            Record(
                method=method,
                n_devices=len(devices),
                epoch=epoch,
                test_acc=test_acc,
                sec_per_epoch=seconds,
                samples_per_sec=n / seconds,
                train_loss=float(loss_sum) / n,
                hardware=label,
                profile=profile.name,
                model=model_name,
                dataset=dataset,
            )
        )
    net.load_state_dict(replicas[0].state_dict())
    return records
