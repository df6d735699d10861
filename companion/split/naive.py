"""Data parallelism by hand, in one process: split a batch, sum the gradients, update.

Used in: chapter 2.

One step of data-parallel SGD on ``k`` devices, each holding its own copy
(*replica*) of the model:

1. :func:`split_batch` cuts the minibatch into ``k`` shards, one per device;
2. each replica runs forward and backward on its shard (:func:`forward_backward`);
3. :func:`allreduce_on_devices` sums each parameter's gradient over the replicas and writes
   the sum back into every replica (:func:`allreduce_grads`);
4. each replica takes the same SGD step (:func:`sgd`), so the replicas stay
   identical without ever exchanging parameters.

:func:`train_batch` does one thing at a time, as listed above;
:mod:`companion.split.fused` computes the same step with fewer operations.

Loss weighting: each device's loss is the **sum** of its per-sample losses
divided by the **global** batch size ``n``. The summed gradient is then
``sum_i grad(sum over shard i) / n = grad(sum over the batch) / n``, the
gradient of the mean loss over the global batch, whatever the shard sizes.
Averaging per-device *means* instead would give the samples of a smaller shard
more weight whenever the shards are uneven.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from ..core.checks import check_batch, check_int, check_module, check_sequence
from ..core.models import check_parameters
from ..core.training import check_lr

__all__ = [
    "shard_sizes",
    "split_batch",
    "copy_replicas",
    "allreduce_on_devices",
    "forward_backward",
    "allreduce_grads",
    "sgd",
    "train_batch",
    "shard_loss",
]

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def shard_sizes(batch_size: int, n_shards: int) -> list[int]:
    """Sizes of ``n_shards`` shards of a batch: differing by at most one, first larger.

    ``shard_sizes(10, 3) == [4, 3, 3]``, as ``torch.tensor_split`` cuts.
    ``torch.chunk`` and ``nn.parallel.scatter`` make every shard but the last
    ``ceil(n / k)`` long instead: ``[4, 4, 2]``, and for 6 samples on 4 devices
    only three shards, ``[2, 2, 2]``, which leaves a device idle.
    """
    _check_shards(batch_size, n_shards)
    q, r = divmod(batch_size, n_shards)
    return [q + 1] * r + [q] * (n_shards - r)


def _check_shards(batch_size: int, n_shards: int) -> None:
    check_int(batch_size, "batch_size", 0)
    if check_int(n_shards, "n_shards", 0) < 1:
        raise ValueError(f"need at least one device, got {n_shards}")
    if batch_size < n_shards:
        raise ValueError(
            f"a batch of {batch_size} samples cannot be split across {n_shards} "
            f"devices (each needs at least one sample): use a batch of at least "
            f"{n_shards} samples or fewer devices"
        )


def _check_pair(X: torch.Tensor, y: torch.Tensor) -> None:
    if len(X) != len(y):
        raise ValueError(
            f"X has {len(X)} samples but y has {len(y)}: "
            f"pass the features and labels of one minibatch"
        )


def split_batch(
    X: torch.Tensor, y: torch.Tensor, devices: Sequence[torch.device]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split ``X`` and ``y`` along dimension 0 into one shard per device, in order.

    Shard sizes come from :func:`shard_sizes`. On a virtual device (the
    batch's own device, named again) a shard is a view of the batch, not a copy.
    """
    _check_pair(X, y)
    sizes = shard_sizes(len(y), len(devices))
    X_shards = [X_i.to(d, non_blocking=True) for X_i, d in zip(X.split(sizes), devices)]
    y_shards = [y_i.to(d, non_blocking=True) for y_i, d in zip(y.split(sizes), devices)]
    return X_shards, y_shards


def copy_replicas(net: nn.Module, devices: Sequence[torch.device]) -> list[nn.Module]:
    """One independent copy of ``net`` per device, with no gradients.

    ``net.to(device)`` would not do: ``nn.Module.to`` moves the module in
    place and returns the module itself, so two virtual devices would share
    one set of parameters and their gradients would pile up in one tensor.
    ``copy.deepcopy`` makes real copies.
    """
    _check_replicate(net, devices)
    replicas = [copy.deepcopy(net).to(d) for d in devices]
    for replica in replicas:
        replica.zero_grad(set_to_none=True)
    return replicas


def _check_replicate(net: nn.Module, devices: Sequence[torch.device]) -> None:
    check_module(net, "net")
    if not devices:
        raise ValueError("replicate needs at least one device")


def _check_one_per_device(tensors: list[torch.Tensor]) -> None:
    """``ValueError`` unless ``tensors`` are one or more same-shaped, unshared tensors."""
    check_sequence(tensors, "tensors", "tensors, one per device", 1)
    seen = set()
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise ValueError(
                f"tensor {i} has shape {tuple(t.shape)} but tensor 0 has "
                f"{tuple(tensors[0].shape)}: pass one tensor per device, all the same shape"
            )
        if t.numel() and (t.device, t.data_ptr()) in seen:  # an empty tensor holds no memory
            raise ValueError(
                f"tensor {i} shares memory with an earlier one and would be counted "
                f"twice: give every device its own copy (see copy_replicas)"
            )
        seen.add((t.device, t.data_ptr()))


@torch.no_grad()
def allreduce_on_devices(tensors: list[torch.Tensor]) -> None:
    """Sum same-shaped tensors, one per device, into every one of them, **in place**.

    The naive all-reduce: add everything into the first tensor (a *reduce*),
    then copy the sum into the others (a *broadcast*). The tensors are
    overwritten (``add_``, ``copy_``), never replaced, so whoever holds them,
    such as a parameter's ``.grad``, sees the sum.
    """
    _check_one_per_device(tensors)
    first = tensors[0]
    for t in tensors[1:]:
        first.add_(t.to(first.device))
    for t in tensors[1:]:
        t.copy_(first)


def shard_loss(
    net: nn.Module, X_i: torch.Tensor, y_i: torch.Tensor, batch_size: int, loss: Loss
) -> torch.Tensor:
    """The loss of one device's shard: its per-sample losses summed, over ``batch_size``."""
    check_int(batch_size, "batch_size", 1, "the global batch's sample count")
    per_sample = loss(net(X_i), y_i)
    if per_sample.shape != y_i.shape:
        raise ValueError(
            f"loss must give one value per sample, e.g. nn.CrossEntropyLoss"
            f"(reduction='none'); got shape {tuple(per_sample.shape)}"
        )
    return per_sample.sum() / batch_size


def _check_split_step(replicas, X_shards, y_shards, batch_size: int) -> None:
    """One replica per ``(X_i, y_i)`` shard; ``batch_size`` is their samples (zip would cut)."""
    check_sequence(replicas, "replicas", "models, one per device (copy_replicas)", 1)
    if not len(replicas) == len(X_shards) == len(y_shards):
        raise ValueError(
            f"got {len(replicas)} replicas, {len(X_shards)} X shards and {len(y_shards)} "
            f"y shards: give one shard of each per replica (split_batch(X, y, devices))"
        )
    samples = sum(len(y_i) for y_i in y_shards)
    if check_int(batch_size, "batch_size", 1) != samples:
        raise ValueError(
            f"batch_size must be the global batch, the shards' {samples} samples, got "
            f"{batch_size}: each device's loss sum is divided by it"
        )


def forward_backward(
    replicas: Sequence[nn.Module],
    X_shards: Sequence[torch.Tensor],
    y_shards: Sequence[torch.Tensor],
    batch_size: int,
    loss: Loss,
) -> list[torch.Tensor]:
    """Forward and backward on every device; returns each device's (detached) loss.

    ``loss`` gives one value per sample (``reduction="none"``); each device
    backpropagates their sum divided by the global ``batch_size``.
    """
    _check_split_step(replicas, X_shards, y_shards, batch_size)
    losses = []
    for net, X_i, y_i in zip(replicas, X_shards, y_shards):
        shard = shard_loss(net, X_i, y_i, batch_size, loss)
        shard.backward()
        losses.append(shard.detach())
    return losses


def allreduce_grads(replicas: Sequence[nn.Module]) -> None:
    """All-reduce every parameter's gradient across the replicas, one at a time."""
    check_sequence(replicas, "replicas", "models, one per device", 1)
    for params in zip(*(net.parameters() for net in replicas)):
        if params[0].grad is not None:
            allreduce_on_devices([p.grad for p in params])


@torch.no_grad()
def sgd(params: Iterable[nn.Parameter], lr: float) -> None:
    """Minibatch SGD in place, ``p -= lr * p.grad``, then drop the gradient."""
    _check_sgd(params, lr)
    for p in params:
        if p.grad is not None:
            p.sub_(p.grad, alpha=lr)
            p.grad = None


def _check_sgd(params: Iterable[nn.Parameter], lr: float) -> None:
    check_parameters(params)
    check_lr(lr)


def train_batch(
    X: torch.Tensor,
    y: torch.Tensor,
    replicas: Sequence[nn.Module],
    devices: Sequence[torch.device],
    lr: float,
    loss: Loss | None = None,
    *,
    forward_backward: Callable[..., list[torch.Tensor]] = forward_backward,
    allreduce_grads: Callable[[Sequence[nn.Module]], None] = allreduce_grads,
    sgd: Callable[[Iterable[nn.Parameter], float], None] = sgd,
) -> torch.Tensor:
    """One data-parallel SGD step by hand; returns the mean loss, on ``devices[0]``.

    Equal, up to rounding, to one SGD step of a single model on the whole
    batch, for any number of devices and shard sizes, unless the model has
    BatchNorm in training mode (each device then normalises with the
    statistics of its own shard). The three phases are arguments so that
    :mod:`companion.split.fused` can swap in faster versions of them.
    """
    loss = loss or nn.CrossEntropyLoss(reduction="none")
    _check_step(X, y, replicas, devices, lr, loss)
    X_shards, y_shards = split_batch(X, y, devices)
    losses = forward_backward(replicas, X_shards, y_shards, len(y), loss)
    allreduce_grads(replicas)
    for net in replicas:
        sgd(net.parameters(), lr)
    return sum(part.to(devices[0]) for part in losses)


def _check_step(X, y, replicas, devices, lr: float, loss: Loss) -> None:
    check_lr(lr)
    if len(replicas) != len(devices):
        raise ValueError(
            f"{len(replicas)} replicas for {len(devices)} devices: "
            f"copy_replicas(net, devices) makes one per device"
        )
    if replicas:
        check_batch(replicas[0], X, y, loss)
