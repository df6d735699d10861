"""Training on one device: the loop, evaluation and honest timing.

Used in: chapter 1, and as the reference every parallel method is compared with.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable, Iterable
from functools import partial

import torch
from torch import nn

from .allocator import keep_freed_memory
from .checks import check_batch, check_instance, check_int, check_lr, check_module, check_training
from .clip import clip_before_step
from .devices import gpu_indices, is_virtual, model_device, synchronize
from .lines import progress_bar
from .lr import set_lr
from .precision import MathMode, amp_train_step
from .profiles import Profile, get_profile
from .results import Record, record_maker
from .timer import Timer

__all__ = [
    "set_seed",
    "Timer",
    "accuracy",
    "evaluate_accuracy",
    "train_step",
    "step_for",
    "train_epoch",
    "warm_up",
    "fit",
    "train",
    "flat_params",
    "sgd_steps",
]


def set_seed(seed: int) -> None:
    """Seed Python's and torch's generators (CPU and every GPU)."""
    check_int(seed, "seed", 0, "torch takes seeds below 2**64", 2**64 - 1)
    random.seed(seed)
    torch.manual_seed(seed)


def accuracy(y_hat: torch.Tensor, y: torch.Tensor) -> int:
    """Number of rows of logits ``y_hat`` whose arg-max equals the label in ``y``."""
    if len(y_hat) != len(y):
        raise ValueError(f"{len(y_hat)} rows of logits for {len(y)} labels")
    return int((y_hat.argmax(dim=1) == y).sum())


@torch.no_grad()
def evaluate_accuracy(
    net: nn.Module, data_iter: Iterable, device: torch.device | str | None = None
) -> float:
    """Fraction of examples in ``data_iter`` classified correctly (in eval mode).

    The batches go to ``device``, by default the device of ``net``.
    """
    device = device or model_device(net)
    was_training = net.training
    net.eval()
    correct = total = 0
    for X, y in data_iter:
        X, y = X.to(device), y.to(device)
        correct += accuracy(net(X), y)
        total += len(y)
    net.train(was_training)
    if total == 0:
        raise ValueError("evaluate_accuracy got an empty iterator")
    return correct / total


def train_step(
    net: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
) -> torch.Tensor:
    """One minibatch SGD step; returns the (detached) mean loss of the batch.

    ``X`` goes to the model's device; the labels go where the output is
    (the model's device, or the output device of ``nn.DataParallel``).
    """
    check_batch(net, X, y, loss_fn)
    optimizer.zero_grad(set_to_none=True)
    y_hat = net(X.to(model_device(net), non_blocking=True))
    loss = loss_fn(y_hat, y.to(y_hat.device, non_blocking=True))
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_for(mode: MathMode):
    """The training step for ``mode``: :func:`train_step`, or the same under autocast."""
    check_instance(mode, "mode", MathMode, "pass MathMode(profile.precision, device)")
    return train_step if mode.plain else partial(amp_train_step, mode=mode)


def train_epoch(
    net: nn.Module,
    train_iter: Iterable,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device | str | None = None,
    on_step: Callable[[int, torch.Tensor, int], None] | None = None,
    step=train_step,
    max_steps: int | None = None,
) -> tuple[float, int]:
    """One pass over ``train_iter``; returns ``(mean training loss, samples seen)``.

    Batches go to ``device`` (by default the model's). The loss is summed on
    the device and read once at the end: calling ``.item()`` every step would
    force a synchronisation per step. ``step`` is ``train_step`` or a step with
    the same arguments (``partial(amp_train_step, mode=...)``);
    ``on_step(k, loss_sum, samples)`` runs after the pass's step ``k`` (1, 2,
    ...) with that batch's loss sum, still on the device; ``max_steps`` ends
    the pass early.
    """
    _check_epoch(net, max_steps)
    device = device or model_device(net)
    net.train()
    loss_sum = torch.zeros((), device=device)
    n = 0
    for k, (X, y) in enumerate(train_iter, 1):
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = step(net, X, y, loss_fn, optimizer) * len(y)
        loss_sum += loss
        n += len(y)
        if on_step is not None:
            on_step(k, loss, len(y))
        if k == max_steps:
            break
    return float(loss_sum) / max(n, 1), n


def _check_epoch(net: nn.Module, max_steps: int | None) -> None:
    check_module(net)
    if max_steps is not None:  # 0 would never equal a step number: the whole pass
        check_int(max_steps, "max_steps", 1, "None for the whole pass")


def warm_up(net: nn.Module, X: torch.Tensor, y: torch.Tensor, lr: float, steps: int = 3) -> None:
    """Run ``steps`` training steps on a throw-away copy of ``net``.

    The first steps on a device pay one-off costs (memory allocation, kernel
    selection, lazy initialisation). Paying them on a copy keeps them out of
    the timed epochs without changing the model that is trained, and
    ``fork_rng`` keeps the random streams where they were.
    """
    check_lr(lr)
    check_int(steps, "steps", 0)
    with torch.random.fork_rng(devices=gpu_indices([X.device])):
        shadow = copy.deepcopy(net)
        opt = torch.optim.SGD(shadow.parameters(), lr=lr)
        for _ in range(steps):
            train_step(shadow, X, y, nn.CrossEntropyLoss(), opt)
    synchronize(X.device)


def fit(
    net: nn.Module,
    train_iter,
    test_iter,
    optimizer: torch.optim.Optimizer,
    epochs: int,
    record: Callable[..., Record],
    step=train_step,
    on_step: Callable[[int, torch.Tensor, int], None] | None = None,
) -> list[Record]:
    """Chapter 1's loop: each epoch one timed pass of :func:`train_epoch`, then the test.

    ``record`` (from :func:`~companion.core.results.record_maker`) labels each epoch's
    :class:`Record`; ``step`` and ``on_step`` go to :func:`train_epoch`. The timer
    (:class:`Timer`) synchronises the model's device and excludes the evaluation.
    """
    check_int(epochs, "epochs", 1, "the number of passes over train_iter")
    keep_freed_memory()  # steady CPU step times: glibc's malloc keeps freed memory
    device, loss_fn, records = model_device(net), nn.CrossEntropyLoss(), []
    for epoch in range(1, epochs + 1):
        with Timer(device, share=True) as t:
            loss, n = train_epoch(net, train_iter, loss_fn, optimizer, device, on_step, step)
        acc, secs, share = evaluate_accuracy(net, test_iter, device), t.seconds, t.cpu_share
        records.append(record(epoch, acc, seconds=secs, samples=n, loss=loss, cpu_share=share))
    return records


def train(
    net: nn.Module,
    train_iter,
    test_iter,
    *,
    epochs: int,
    lr: float,
    device: torch.device | str | None = None,
    method: str = "1 device",
    n_devices: int = 1,
    profile: Profile | str | None = None,
    model_name: str = "",
    dataset: str = "",
    warmup_steps: int = 3,
    progress: bool | None = None,
    precision: str | None = None,
    channels_last: bool | None = None,
    lr_schedule: Callable[[int], float] | None = None,
    clip: float | None = None,
) -> list[Record]:
    """Train ``net`` on one device with minibatch SGD (:func:`fit`); a :class:`Record` per epoch.

    ``precision`` (``fp32``, ``bf16``, ``fp16`` or ``auto``) and
    ``channels_last`` choose the math (:class:`~companion.core.precision.MathMode`),
    recorded in every :class:`Record`; left unset, the profile's (fp32 in
    ``ci`` and ``cpu``, chapter 1's fast baseline in ``gpu``).
    ``lr_schedule(step)``, if given, is the rate of global step ``step``
    (0, 1, ...) in place of ``lr`` (chapter 7's warm-up). ``clip``, if given,
    clips the gradient to that global 2-norm before every step (:func:`clip_before_step`).

    ``warmup_steps`` steps on a copy of the model run first (see :func:`warm_up`).
    ``progress`` shows a bar on a terminal (see :func:`progress_bar`), never in a notebook.
    """
    check_training(epochs, lr, train_iter, test_iter)
    profile = get_profile(profile)
    device = torch.device(device) if device is not None else model_device(net)
    precision = profile.precision if precision is None else precision
    layout = profile.channels_last if channels_last is None else channels_last
    mode = MathMode(precision, device, layout)
    mode.place(net, device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr if lr_schedule is None else lr_schedule(0))
    if clip is not None:
        clip_before_step(optimizer, clip)
    if warmup_steps:
        X, y = next(iter(train_iter))
        warm_up(net, X.to(device), y.to(device), lr, warmup_steps)
    labels = dict(profile=profile.name, model=model_name, dataset=dataset, precision=str(mode))
    record = record_maker(method, n_devices, virtual=is_virtual(n_devices, device), **labels)
    done = itertools.count(1)
    with progress_bar(
        epochs * len(train_iter), f"{method}, {n_devices} device(s)", progress
    ) as bar:

        def on_step(*_) -> None:
            steps = next(done)
            bar.update(1)
            if lr_schedule is not None:  # the rate of the next step
                set_lr(optimizer, lr_schedule(steps))

        return fit(net, train_iter, test_iter, optimizer, epochs, record, step_for(mode), on_step)


def flat_params(net: nn.Module) -> torch.Tensor:
    """All parameters of ``net``, flattened into one CPU tensor (for comparisons)."""
    check_module(net)
    return torch.cat([p.detach().reshape(-1).cpu() for p in net.parameters()])


def sgd_steps(
    net: nn.Module, batches: Iterable, lr: float, steps: int, clip: float | None = None
) -> torch.Tensor:
    """``steps`` plain SGD steps on ``net``, one per ``(X, y)`` of ``batches``.

    The single-process reference that every parallel method is compared
    with: ``batches`` yields the *global* minibatches the parallel method
    reads; ``clip`` as in :func:`train`. Returns :func:`flat_params` of the result.
    """
    check_lr(lr)
    check_int(steps, "steps", 0)
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=lr)
    if clip is not None:
        clip_before_step(optimizer, clip)
    device = model_device(net)
    for _, (X, y) in zip(range(steps), batches):
        train_step(net, X.to(device), y.to(device), loss_fn, optimizer)
    return flat_params(net)
