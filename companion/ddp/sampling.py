"""Who reads which sample: ``DistributedSampler`` to train, an exact split to test.

Used in: chapter 5.

Training: each rank draws its minibatches from ``DistributedSampler``, which
shuffles the whole data set with ``seed + epoch`` (the same permutation on
every rank) and deals it out like cards, rank ``r`` taking positions
``r, r + p, r + 2p, ...`` of ``p`` ranks. To give every rank the same number of
samples it *pads*: when ``len(dataset)`` is not a multiple of ``p`` it repeats
the first few indices. That is harmless for training, but an evaluation that
used it would count those samples twice, so :func:`evaluate_distributed`
splits the test set without padding and sums the counts across ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler

from ..core.batches import check_batch_size
from ..core.checks import check_int, check_not_empty
from ..core.data import ImageSet
from ..core.devices import model_device
from .detectors import check_eval_count

__all__ = [
    "SampledLoader",
    "sampler_indices",
    "eval_indices",
    "count_correct",
    "evaluate_distributed",
]


class SampledLoader:
    """Minibatches of a device-resident split, in the order a sampler yields indices.

    Like :class:`~companion.core.loaders.DeviceLoader`, the split is copied to
    ``device`` once and each minibatch is one indexing operation; the order
    comes from ``sampler`` (e.g. a ``DistributedSampler``), consulted afresh at
    every pass. ``indices`` holds the indices of the last pass (a CPU tensor),
    so one can check afterwards what this rank actually read.
    """

    def __init__(
        self,
        dataset: ImageSet,
        sampler: Sampler[int],
        batch_size: int,
        device: torch.device | str = "cpu",
    ):
        check_batch_size(batch_size)
        check_not_empty(dataset, "dataset", "give a data set with samples")
        self.X, self.y = dataset.tensors(device)
        self.sampler, self.batch_size = sampler, batch_size
        self.indices = torch.empty(0, dtype=torch.long)

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.indices = torch.tensor(list(self.sampler), dtype=torch.long)
        order = self.indices.to(self.X.device)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.X[idx], self.y[idx]


def _check_sampling(world_size: int, epoch: int) -> None:
    check_int(world_size, "world_size")
    check_int(epoch, "epoch", 0)


def sampler_indices(
    dataset: Sized,
    world_size: int,
    epoch: int = 0,
    *,
    shuffle: bool = True,
    seed: int = 0,
) -> list[list[int]]:
    """The indices a ``DistributedSampler`` gives each of ``world_size`` ranks.

    Computed without a process group (``num_replicas`` and ``rank`` given
    explicitly), exactly as each rank's sampler does after ``set_epoch(epoch)``.
    """
    _check_sampling(world_size, epoch)
    shares = []
    for rank in range(world_size):
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def eval_indices(n: int, rank: int, world_size: int) -> range:
    """Rank ``rank``'s share of ``n`` test samples: ``rank, rank + p, ...``, no padding.

    The same dealing as an unshuffled ``DistributedSampler`` minus its padding:
    the shares are disjoint, cover every sample once, and differ in size by
    at most one.
    """
    check_int(world_size, "world_size")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    return range(rank, n, world_size)


@torch.no_grad()
def count_correct(
    net: nn.Module, X: torch.Tensor, y: torch.Tensor, batch_size: int = 256
) -> torch.Tensor:
    """``[correct predictions, samples]`` of ``net`` on ``(X, y)``: an int64 tensor."""
    check_batch_size(batch_size)
    counts = torch.zeros(2, dtype=torch.int64, device=X.device)
    for start in range(0, len(y), batch_size):
        y_hat = net(X[start : start + batch_size])
        counts[0] += (y_hat.argmax(dim=1) == y[start : start + batch_size]).sum()
        counts[1] += len(y_hat)
    return counts


def evaluate_distributed(
    net: nn.Module,
    dataset: ImageSet,
    device: torch.device | str | None = None,
    batch_size: int = 256,
) -> float:
    """Test accuracy over the whole of ``dataset``, each rank evaluating its share.

    Every rank counts correct predictions on :func:`eval_indices`, then one
    ``all_reduce`` sums ``[correct, samples]`` over the ranks. Pass the
    *unwrapped* model (``ddp_net.module``): DDP's forward can run a collective
    of its own (a broadcast of rank 0's buffers) that every rank must join in
    step; the plain module keeps the evaluation local. Raises
    :class:`~companion.ddp.detectors.EvaluationMiscount` unless exactly
    ``len(dataset)`` samples were counted. Call it on every rank.
    """
    check_not_empty(dataset, "dataset", "an accuracy needs a test set with samples")
    device = device or model_device(net)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    idx = torch.tensor(eval_indices(len(dataset), rank, world_size), dtype=torch.long)
    X, y = ImageSet(dataset.images[idx], dataset.labels[idx]).tensors(device)
    was_training = net.training
    net.eval()
    counts = count_correct(net, X, y, batch_size)
    net.train(was_training)
    dist.all_reduce(counts)
    correct, counted = counts.tolist()
    check_eval_count(counted, len(dataset))
    return correct / counted
