"""Data parallelism across processes: ``DataPartitioner`` and ``average_gradients``.

Used in: chapter 3 (chapter 5 compares DDP with it).

This is the ``dist_tuto`` recipe done right. Each rank trains a replica of
the model on its own shard of the data; after every backward pass
:func:`average_gradients` averages the gradients across ranks with the
hand-written ring all-reduce, so every replica takes the same step. With
equal shards and local batch ``global_batch / world_size`` this is exactly
single-process SGD on the union of the ranks' minibatches
(:func:`~.reference.train_reference` computes that, and a test checks the two agree).
``dist_tuto`` divides the summed gradients by the world size, which is wrong
as soon as the ranks' batches differ in size; ``average_gradients`` weighs
each rank by its sample count when given it (see :mod:`.uneven`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset, Subset

from ..core.batches import check_batch_fits, check_batch_size, rank_batch_size
from ..core.checks import check_choice, check_data, check_int, check_not_empty
from ..core.data import Data, ImageSet
from ..core.devices import model_device
from ..core.loaders import DeviceLoader
from ..core.models import MODELS, get_model
from ..core.precision import check_fp32
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import (
    Timer,
    check_lr,
    evaluate_accuracy,
    flat_params,
    set_seed,
    warm_up,
)
from ..runtime.epochs import Rank, train_epochs
from ..runtime.group import rank_device
from .allreduce import ALLREDUCES, allreduce_mean

__all__ = [
    "DataPartitioner",
    "average_gradients",
    "TrainResult",
    "train_worker",
    "averaged_step",
]


def _check_sizes(sizes: Sequence[int], n: int) -> None:
    if any(not isinstance(s, int) or isinstance(s, bool) for s in sizes):
        raise TypeError(
            f"sizes are sample counts (integers), got {list(sizes)}; for "
            f"equal shards use DataPartitioner.even(dataset, world_size)"
        )
    if not sizes or min(sizes) < 0 or sum(sizes) > n:
        raise ValueError(
            f"sizes {list(sizes)} must be non-negative and add up to at most "
            f"the {n} samples of the dataset"
        )


def _check_even(dataset: Dataset, world_size: int) -> None:
    check_int(world_size, "world_size")
    check_not_empty(dataset, "dataset", "give a data set with samples")


class DataPartitioner:
    """A seeded split of a dataset into disjoint shards of given sizes (sample counts).

    The indices are shuffled once with ``seed`` (the same on every rank, so
    the shards never overlap) and cut into consecutive pieces of ``sizes``.
    ``use(i)`` returns shard ``i``: an :class:`~companion.core.data.ImageSet` for an
    ``ImageSet`` (so :class:`~companion.core.loaders.DeviceLoader` can serve it), a
    ``Subset`` otherwise. :meth:`even` makes one equal shard per rank.
    """

    def __init__(self, dataset: Dataset, sizes: Sequence[int], seed: int = 1234):
        _check_sizes(sizes, len(dataset))
        self.dataset = dataset
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(dataset), generator=g)
        self.partitions = list(torch.split(order[: sum(sizes)], list(sizes)))

    @classmethod
    def even(cls, dataset: Dataset, world_size: int, seed: int = 1234) -> DataPartitioner:
        """``world_size`` shards of ``len(dataset) // world_size`` samples each.

        The remainder (fewer than ``world_size`` samples) is left out.
        """
        _check_even(dataset, world_size)
        return cls(dataset, [len(dataset) // world_size] * world_size, seed)

    def __len__(self) -> int:
        return len(self.partitions)

    def use(self, i: int) -> Dataset:
        """Shard ``i`` (one per rank: ``use(rank)``)."""
        idx = self.partitions[i]
        if isinstance(self.dataset, ImageSet):
            return ImageSet(self.dataset.images[idx], self.dataset.labels[idx])
        return Subset(self.dataset, idx.tolist())


def average_gradients(net: nn.Module, allreduce: str = "ring", n_local: int | None = None) -> None:
    """Replace each gradient of ``net`` with its average over all ranks, in place.

    One all-reduce per parameter tensor, as in the ``dist_tuto`` recipe;
    ``allreduce`` names one of :data:`~companion.collectives.allreduce.ALLREDUCES`.
    Without ``n_local`` every rank's mean gradient counts equally (the sum
    over the world size): right only when every rank averaged over the same
    number of samples. With ``n_local``, this rank's sample count, each
    rank's mean is weighed by its count: the sums ``n_local * grad`` and the
    total count are all-reduced and divided, which gives the gradient of the
    mean loss over the global batch however unevenly it was split.
    """
    reduce = _check_averaging(allreduce, n_local)
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    if n_local is None:
        for grad in grads:
            allreduce_mean(grad, reduce)
        return
    n_total = torch.tensor([float(n_local)], device=grads[0].device)
    reduce(n_total)  # one extra, one-element all-reduce per step
    for grad in grads:
        grad *= n_local  # this rank's sum of per-sample gradients
        reduce(grad)
        grad /= n_total


def _check_averaging(allreduce: str, n_local: int | None):
    if allreduce not in ALLREDUCES:
        raise ValueError(f"unknown all-reduce {allreduce!r}; choose from {list(ALLREDUCES)}")
    if n_local is not None:
        check_batch_size(n_local, "n_local")
    return ALLREDUCES[allreduce]


class TrainResult(NamedTuple):
    """What :func:`train_worker` returns from each rank."""

    records: list[Record]  # rank 0's view, one per epoch; [] on the other ranks
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    allreduce_seconds: list[float]  # per epoch: time spent in average_gradients


def train_worker(
    rank: int,
    world_size: int,
    data: Data,
    profile: Profile | str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    allreduce: str = "ring",
    seed: int = 0,
    max_steps: int | None = None,
    precision: str | None = None,
    channels_last: bool | None = None,
) -> TrainResult:
    """Worker: data-parallel SGD with :func:`average_gradients`.

    Rank ``r`` trains on shard ``r`` of ``data.train``
    (:meth:`DataPartitioner.even`), reshuffled every epoch with seed
    ``seed + r``, in minibatches of ``global_batch / world_size``; sizes left
    unset come from the profile (the model too: pass ``model="lenet"`` for an
    exact comparison, since BatchNorm's statistics are per rank). Each pass
    is chapter 1's ``train_epoch`` with :func:`averaged_step`. Rank 0
    records each epoch: test accuracy on the whole test set, seconds of
    training, training loss averaged over all ranks. ``max_steps`` stops
    early. The hand-written all-reduces compute in fp32 only.
    """
    _check_worker(data, model, global_batch, epochs, lr, allreduce, max_steps, channels_last)
    profile = get_profile(profile)
    precision = check_fp32(precision or "fp32", "train_worker")  # whatever the profile says
    model, lr, device = model or profile.processes.model, lr or profile.lr, rank_device()
    shard = DataPartitioner.even(data.train, world_size, seed).use(rank)
    batch = rank_batch_size(global_batch or profile.batch_size, world_size)
    check_batch_fits(batch, len(shard), world_size, "global_batch / world_size")
    set_seed(seed)  # every replica starts from the same parameters
    net = get_model(model).to(device)
    warm_up(net, *next(iter(DeviceLoader(shard, batch, device))), lr)
    seconds = [0.0]  # per epoch: the time spent averaging gradients
    run = Rank(
        method=f"average_gradients ({allreduce})",
        device=device,
        train_iter=DeviceLoader(shard, batch, device, seed=seed + rank),  # reshuffles each pass
        net=net,
        optimizer=torch.optim.SGD(net.parameters(), lr=lr),
        evaluate=partial(_rank0_accuracy, test=data.test),
        epochs=epochs or profile.processes.epochs,
        labels=dict(profile=profile.name, model=model, dataset=data.name, precision=precision),
        step=partial(averaged_step, allreduce=allreduce, seconds=seconds),
        max_steps=max_steps,
    )
    records = train_epochs(run, on_epoch=lambda *_: seconds.append(0.0))
    return TrainResult(records, flat_params(net), seconds[:-1])


def averaged_step(net, X, y, loss_fn, optimizer, allreduce: str, seconds: list[float]):
    """Chapter 1's step with :func:`average_gradients` between backward and the update.

    The average is weighed by sample counts (an epoch's last batch may be
    short); its seconds are added to ``seconds[-1]``.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(net(X), y)
    loss.backward()
    with Timer(X.device) as averaging:
        average_gradients(net, allreduce, n_local=len(y))
    seconds[-1] += averaging.seconds
    optimizer.step()
    return loss.detach()


def _rank0_accuracy(net: nn.Module, test: Dataset) -> float:
    """Rank 0 evaluates on the whole test set; the others skip it (``nan``)."""
    if dist.get_rank() != 0:
        return float("nan")
    return evaluate_accuracy(net, DeviceLoader(test, 256, model_device(net), shuffle=False))


def _check_worker(data, model, global_batch, epochs, lr, allreduce, max_steps, channels_last):
    """``None`` means the profile's; anything else must be valid (0 is not ``None``)."""
    check_data(data)
    if channels_last:
        raise ValueError("train_worker keeps the default memory layout: pass channels_last=False")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 (or None for whole epochs), got {max_steps}")
    if model is not None:
        check_choice(model, "model", MODELS)
    for name, value in (("global_batch", global_batch), ("epochs", epochs)):
        if value is not None:
            check_int(value, name)
    if lr is not None:
        check_lr(lr)
    _check_averaging(allreduce, None)
