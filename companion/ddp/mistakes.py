"""Published DDP examples' mistakes, reproduced on purpose for the detectors to catch.

Used in: chapter 5.

:func:`train_with_mistake` is a short DDP training loop written the way a
DP-vs-DDP summary page and a Kubernetes DDP tutorial write theirs (chapter 5
cites both), with at most one of their mistakes switched on;
:func:`evaluate_three_ways` evaluates one model correctly and in the two
wrong ways a distributed evaluation is commonly written. Both are workers
for :func:`~companion.runtime.launcher.launch`; they return evidence, and the
detectors of :mod:`companion.ddp.detectors` judge it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import RandomSampler
from torch.utils.data.distributed import DistributedSampler

from ..core.checks import check_data, check_module
from ..core.data import Data, ImageSet
from ..core.models import get_model
from ..core.precision import check_fp32
from ..core.training import evaluate_accuracy, set_seed, train_epoch
from ..runtime.group import ddp_device_ids, rank_device
from .detectors import MistakeDetected, RankTrace, check_logits, diagnose, fingerprint
from .sampling import SampledLoader, count_correct, evaluate_distributed

__all__ = [
    "MISTAKES",
    "MistakeRun",
    "train_with_mistake",
    "data_parallel_on",
    "detect",
    "evaluate_three_ways",
]

MISTAKES: dict[str | None, str] = {
    None: "none: DDP, a DistributedSampler with set_epoch, logits into the loss",
    "dataparallel": "the DP-vs-DDP page: its 'DDP' example wraps the model in DataParallel",
    "no-sampler": "the Kubernetes DDP tutorial: no DistributedSampler, one shuffle for all",
    "no-set-epoch": "a DistributedSampler, but set_epoch(epoch) is never called",
    "softmax": "the Kubernetes DDP tutorial: a softmax before CrossEntropyLoss",
}


class MistakeRun(NamedTuple):
    """What one rank of :func:`train_with_mistake` returns."""

    trace: RankTrace  # the model's fingerprint and the indices read, per epoch
    outputs: torch.Tensor  # the model's outputs on the first 8 test images
    losses: list[float]  # this rank's mean training loss, per epoch


def _check_mistake(data: Data, mistake: str | None, precision: str) -> None:
    check_data(data)
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; choose from {list(MISTAKES)}")
    check_fp32(precision, "train_with_mistake")


def train_with_mistake(
    rank: int,
    world_size: int,
    data: Data,
    mistake: str | None = None,
    *,
    epochs: int = 2,
    global_batch: int = 64,
    lr: float = 0.1,
    seed: int = 0,
    precision: str = "fp32",
) -> MistakeRun:
    """Worker: LeNet trained for ``epochs`` with ``mistake`` (a key of MISTAKES), in fp32.

    Each epoch is one pass of chapter 1's ``train_epoch``.
    """
    _check_mistake(data, mistake, precision)
    device = rank_device()
    set_seed(seed)  # the Kubernetes tutorial seeds every rank alike
    net = get_model("lenet")
    if mistake == "softmax":
        net = nn.Sequential(net, nn.Softmax(dim=1))  # probabilities, not logits
    net = net.to(device)
    if mistake == "dataparallel":
        net = data_parallel_on(net, device)  # one process, one device: no-op
    else:
        net = DDP(net, device_ids=ddp_device_ids(device))
    if mistake == "no-sampler":  # DataLoader(shuffle=True) after the same seed
        generator = torch.Generator().manual_seed(seed)
        sampler = RandomSampler(data.train, generator=generator)
    else:
        sampler = DistributedSampler(data.train, world_size, rank, seed=seed)
    train_iter = SampledLoader(data.train, sampler, global_batch // world_size, device)
    loss_fn, optimizer = nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=lr)
    orders, losses = [], []
    for epoch in range(epochs):
        if mistake != "no-set-epoch" and isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        losses.append(train_epoch(net, train_iter, loss_fn, optimizer, device)[0])
        orders.append(train_iter.indices)
    with torch.no_grad():
        outputs = net(data.test.tensors(device)[0][:8]).cpu()
    return MistakeRun(RankTrace(fingerprint(net), orders), outputs, losses)


def data_parallel_on(net: nn.Module, device: torch.device) -> nn.DataParallel:
    """``nn.DataParallel(net)`` for a rank computing on ``device``, which keeps it there.

    On a GPU rank: ``device_ids=[device]``. On a CPU rank the wrapper passes
    calls through, as torch's does on a machine without a GPU; torch's own
    constructor would move ``net`` to ``cuda:0`` whenever a GPU is present.
    """
    check_module(net)
    device = torch.device(device)  # "cuda:0" as well as torch.device("cuda:0")
    if device.type == "cuda":
        return nn.DataParallel(net, device_ids=[device])
    wrapper = nn.DataParallel.__new__(nn.DataParallel)
    nn.Module.__init__(wrapper)
    wrapper.module, wrapper.device_ids = net, []  # DataParallel.forward: module(*inputs)
    return wrapper


def detect(runs: Sequence[MistakeRun], n: int) -> list[str]:
    """Every problem the detectors find in the ranks' runs (``n`` training samples)."""
    problems = diagnose([run.trace for run in runs], n)
    try:
        check_logits(runs[0].outputs)
    except MistakeDetected as err:
        problems.append(f"{type(err).__name__}: {err}")
    return problems


def evaluate_three_ways(
    rank: int,
    world_size: int,
    data: Data,
    state_dict: dict | None = None,
    model: str = "lenet",
    seed: int = 0,
) -> dict[str, float | int]:
    """Worker: one ``model`` (``state_dict``, else seeded at random) evaluated 3 ways.

    * ``distributed``: :func:`~companion.ddp.sampling.evaluate_distributed` (right);
    * ``per rank``: this rank's ``DistributedSampler`` share, divided by the
      size of the whole test set, as a script that adds a sampler but keeps
      ``correct / len(loader.dataset)`` computes it;
    * ``padded``: the shares' counts summed over ranks, padding included.

    Rank 0 also evaluates the whole test set alone (``single process``).
    """
    device = rank_device()
    set_seed(seed)
    net = get_model(model)
    if state_dict is not None:
        net.load_state_dict(state_dict)
    net = net.to(device).eval()
    seen = {"distributed": evaluate_distributed(net, data.test, device)}
    share = list(DistributedSampler(data.test, world_size, rank, shuffle=False))
    X, y = ImageSet(data.test.images[share], data.test.labels[share]).tensors(device)
    counts = count_correct(net, X, y)
    seen["per rank counted"] = int(counts[1])
    seen["per rank"] = int(counts[0]) / len(data.test)
    dist.all_reduce(counts)
    seen["padded counted"] = int(counts[1])
    seen["padded"] = int(counts[0]) / int(counts[1])
    if rank == 0:
        test_iter = [data.test.tensors(device)]
        seen["single process"] = evaluate_accuracy(net, test_iter, device)
    return seen
