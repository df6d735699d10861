"""Learning-rate rules for a growing global batch: linear scaling and gradual warm-up.

Used in: chapters 5, 7 and 8 (one copy of each rule).

With ``k`` devices that each keep their per-device batch, the global batch
is ``k`` times larger and there are ``k`` times fewer steps per epoch.
Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1
Hour") scale the learning rate by ``k`` (the *linear scaling rule*,
:func:`linear_lr`) and, since a large rate at the start diverges, reach it
by a *gradual warm-up* (:func:`warmup_lr`): the rate grows linearly from a
small one to the target over the first steps. Chapter 5 scales, chapter 7
compares the rules (:data:`LR_RULES`, :func:`lr_schedule`), chapter 8 warms
up after every restart from the same rule.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from .checks import check_choice, check_instance, check_int, check_lr

__all__ = ["LR_RULES", "linear_lr", "scaled_lr", "warmup_lr", "lr_schedule", "set_lr"]

LR_RULES = {
    "none": "the base lr at every device count (the global batch grows, the lr does not)",
    "linear": "lr x devices from the first step (the scaling rule alone, without warm-up)",
    "warmup": "lr x devices, reached by a linear warm-up over the first epochs (Goyal et al.)",
}


def linear_lr(lr: float, world_size: int) -> float:
    """The linear scaling rule: ``lr * world_size``.

    Use it when each rank keeps its per-rank batch as the world grows: the
    global batch is then ``world_size`` times larger, each step averages
    ``world_size`` times more samples, and a proportionally larger step keeps
    the progress per sample about the same (Goyal et al., 2017; large
    factors need a warm-up, chapter 7). With a fixed global batch, keep ``lr``.
    """
    check_lr(lr)
    check_int(world_size, "world_size")
    return lr * world_size


def scaled_lr(lr: float, k: int, rule: str) -> float:
    """The target learning rate for a global batch ``k`` times the base one."""
    check_choice(rule, "rule", LR_RULES)
    return check_lr(lr) if rule == "none" else linear_lr(lr, k)


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


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group of ``optimizer`` steps with ``lr`` from now on."""
    check_instance(optimizer, "optimizer", torch.optim.Optimizer, "pass the optimizer itself")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 <= lr < math.inf:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}: pass the rate to step with")
    for group in optimizer.param_groups:
        group["lr"] = lr
