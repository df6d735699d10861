"""Learning rates for a growing global batch: linear scaling and gradual warm-up.

Used in: chapter 7.

With ``k`` devices that each keep their per-device batch, the global batch
is ``k`` times larger and there are ``k`` times fewer steps per epoch.
Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1
Hour") scale the learning rate by ``k`` (the *linear scaling rule*) and, since
a large rate at the start diverges, reach it by a *gradual warm-up*: the
rate grows linearly from the base rate to ``k`` times it over the first
epochs. :func:`train_scheduled` is chapter 1's one-device loop with a rate
per step; by chapters 2-5's equivalence it trains exactly like ``k`` devices
on the same global batch, so it answers the accuracy question without
processes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..core.checks import check_choice, check_int
from ..core.devices import hardware_label
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import (
    Timer,
    check_lr,
    check_training,
    evaluate_accuracy,
    train_step,
    warm_up,
)

__all__ = ["LR_RULES", "lr_schedule", "scaled_lr", "train_scheduled", "warmup_lr"]

LR_RULES = {
    "none": "the base lr at every device count (the global batch grows, the lr does not)",
    "linear": "lr x devices from the first step (the scaling rule alone, without warm-up)",
    "warmup": "lr x devices, reached by a linear warm-up over the first epochs (Goyal et al.)",
}


def scaled_lr(lr: float, k: int, rule: str) -> float:
    """The target learning rate for a global batch ``k`` times the base one."""
    check_lr(lr)
    check_int(k, "k")
    check_choice(rule, "rule", LR_RULES)
    return lr if rule == "none" else lr * k


def warmup_lr(step: int, lr: float, target: float, warmup_steps: int) -> float:
    """Goyal et al.'s gradual warm-up: ``lr`` at step 0, ``target`` from ``warmup_steps`` on."""
    check_int(step, "step", 0)
    check_int(warmup_steps, "warmup_steps", 0)
    if step >= warmup_steps:
        return target
    return lr + (target - lr) * step / warmup_steps


def lr_schedule(
    lr: float, k: int, rule: str, steps_per_epoch: int, warmup_epochs: int = 2
) -> Callable[[int], float]:
    """``step -> learning rate`` for ``rule`` (see :data:`LR_RULES`)."""
    target = scaled_lr(lr, k, rule)
    if rule != "warmup":
        return lambda step: target
    warmup_steps = check_int(steps_per_epoch, "steps_per_epoch") * warmup_epochs
    return lambda step: warmup_lr(step, lr, target, warmup_steps)


def train_scheduled(
    net: nn.Module,
    train_iter,
    test_iter,
    *,
    epochs: int,
    schedule: Callable[[int], float],
    method: str = "1 device, global batch",
    n_devices: int = 1,
    profile: Profile | str | None = None,
    model_name: str = "",
    dataset: str = "",
    warmup_steps: int = 3,
) -> list[Record]:
    """Chapter 1's loop on the model's device with the rate ``schedule(step)``.

    Like chapter 1's ``train``, ``warmup_steps`` steps on a copy of the model
    run first (they draw the first shuffle of ``train_iter``, as there).
    """
    check_training(epochs, schedule(0), train_iter, test_iter)
    profile = get_profile(profile)
    device = next(net.parameters()).device
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=1.0)
    if warmup_steps:
        X, y = next(iter(train_iter))
        warm_up(net, X.to(device), y.to(device), schedule(0), warmup_steps)
    records, step = [], 0
    for epoch in range(1, epochs + 1):
        net.train()
        loss_sum, n = torch.zeros((), device=device), 0
        with Timer(device) as timer:
            for X, y in train_iter:
                for group in optimizer.param_groups:
                    group["lr"] = schedule(step)
                X, y = X.to(device), y.to(device)
                loss_sum += train_step(net, X, y, loss_fn, optimizer) * len(y)
                n, step = n + len(y), step + 1
        records.append(
            Record(
                method=method,
                n_devices=n_devices,
                epoch=epoch,
                test_acc=evaluate_accuracy(net, test_iter, device),
                sec_per_epoch=timer.seconds,
                samples_per_sec=n / timer.seconds,
                train_loss=float(loss_sum) / n,
                hardware=hardware_label(),
                profile=profile.name,
                model=model_name,
                dataset=dataset,
            )
        )
    return records
