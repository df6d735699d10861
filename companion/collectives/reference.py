"""One process on the workers' global minibatches: what data parallelism must equal.

Used in: chapter 3.

:func:`joined_batches` joins, step by step, the minibatches that the ranks of
:func:`~.partition.train_worker` read (the same shards and shuffles), in rank order.
:func:`train_reference` takes plain SGD steps on them: every parallel run of the
chapter is checked against it. :func:`last_epoch_accuracies` takes the same steps and
measures the test accuracy after each step of the last epoch, so a run's final
accuracy can be read against the steps just before it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from ..core.batches import rank_batch_size
from ..core.checks import check_data, check_int
from ..core.data import Data
from ..core.devices import Device
from ..core.loaders import DeviceLoader
from ..core.models import get_model
from ..core.profiles import Profile, get_profile
from ..core.training import evaluate_accuracy, set_seed, sgd_steps, train_step
from .partition import DataPartitioner

__all__ = ["joined_batches", "train_reference", "last_epoch_accuracies"]


def joined_batches(
    world_size: int, data: Data, global_batch: int, seed: int = 0, device: Device = "cpu"
) -> Iterator[Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """Epoch after epoch, without end, the epoch's steps: each step's global minibatch, the
    ``world_size`` ranks' minibatches joined in rank order (the shards and shuffles of
    ``train_worker``), on ``device``. Read each epoch to its end before asking for the next."""
    check_data(data)
    shards = DataPartitioner.even(data.train, world_size, seed)
    batch = rank_batch_size(global_batch, world_size)
    loaders = [DeviceLoader(shards.use(r), batch, device, seed=seed + r) for r in range(world_size)]
    return _epochs(loaders)


def _epochs(loaders: list[DeviceLoader]) -> Iterator[Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    while True:  # each loader reshuffles its shard at every pass
        yield ((torch.cat(Xs), torch.cat(ys)) for Xs, ys in (zip(*b) for b in zip(*loaders)))


def train_reference(
    world_size: int,
    data: Data,
    profile: Profile | str | None = None,
    *,
    global_batch: int,
    lr: float,
    steps: int,
    model: str | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """One process's SGD on the global minibatches that ``world_size`` workers see.

    Each step takes one ordinary step on the mean loss of one of
    :func:`joined_batches`. Returns the flattened parameters. ``model``
    defaults to :func:`~.partition.train_worker`'s (the profile's processes').
    """
    batches = (b for epoch in joined_batches(world_size, data, global_batch, seed) for b in epoch)
    set_seed(seed)
    net = get_model(model or get_profile(profile).processes.model)
    return sgd_steps(net, batches, lr, steps)


def last_epoch_accuracies(
    world_size: int,
    data: Data,
    profile: Profile | str | None = None,
    *,
    epochs: int | None = None,
    seed: int = 0,
    device: Device = "cpu",
) -> list[float]:
    """Test accuracy after each step of the last of ``epochs`` (default: the profile's
    processes'), on the profile's global batch, lr and processes' model, in one process
    on ``device``: the steps of ``train_worker`` on ``world_size`` ranks (for a model
    without BatchNorm, whose statistics are per rank), up to float rounding. The last
    value is the run's final accuracy. On the CPU it computes in one thread, so that its fp32
    sums, and with them the curve, are the same on every machine (the rounding of a sum
    depends on the thread count)."""
    profile = get_profile(profile)
    epochs = profile.processes.epochs if epochs is None else epochs
    check_int(epochs, "epochs")
    passes = joined_batches(world_size, data, profile.batch_size, seed, device)
    set_seed(seed)
    net = get_model(profile.processes.model).to(device)
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=profile.lr)
    test = DeviceLoader(data.test, 256, device, shuffle=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for epoch in range(epochs):
            accuracies = []
            for X, y in next(passes):
                train_step(net, X, y, loss_fn, optimizer)
                if epoch == epochs - 1:
                    accuracies.append(evaluate_accuracy(net, test))
    finally:
        torch.set_num_threads(threads)
    return accuracies
