"""Workers for the chapter-5 tests (importable by the launcher's fork server as
``tests.ddp.workers``): a BatchNorm model's replicas, and a model with a parameter that
``forward`` never uses."""

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from companion.core import MODELS, get_model, lenet, set_seed
from companion.ddp import ddp_worker, fingerprint, track_buffers

UNUSED = "lenet-unused"


def lenet_with_unused(num_classes: int = 10) -> nn.Sequential:
    """LeNet plus a parameter ``unused`` that its forward pass never touches."""
    net = lenet(num_classes)
    net.register_parameter("unused", nn.Parameter(torch.zeros(3)))
    return net


def register_unused() -> None:
    MODELS.setdefault(UNUSED, lenet_with_unused)


def bn_fingerprints(
    rank: int, world_size: int, wrap: bool = True, steps: int = 3
) -> tuple[str, str]:
    """LeNet-BN trained ``steps`` steps on this rank's own random batches, with DDP (or
    without, ``wrap=False``); ``(fingerprint now, fingerprint with the tracked buffers)``."""
    set_seed(0)
    net = get_model("lenet-bn")
    if wrap:
        net = DDP(net)
    buffers = track_buffers(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    for _ in range(steps):
        X, y = torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(X), y).backward()
        optimizer.step()
    module = getattr(net, "module", net).eval()
    module(X)  # an evaluation of the module, as train_ddp's, moves neither buffers nor snapshot
    return fingerprint(net), fingerprint(net, buffers)


def ddp_with_unused(rank: int, world_size: int, data, **options):
    """:func:`companion.ddp.ddp_worker` on ``lenet-unused``."""
    register_unused()
    return ddp_worker(rank, world_size, data, "ci", model=UNUSED, **options)


def plain_ddp_with_unused(rank: int, world_size: int) -> str:
    """Torch's DDP alone, without find_unused_parameters: two steps; the error it raises."""
    set_seed(0)
    net = DDP(lenet_with_unused())
    X, y = torch.randn(4, 1, 28, 28), torch.arange(4)
    try:
        for _ in range(2):
            nn.functional.cross_entropy(net(X), y).backward()
    except RuntimeError as err:
        return str(err)
    return ""


def load_rank0_first_worker(rank: int, world_size: int, dataset: str) -> str:
    """``load_data_rank0_first`` with the ci profile's data set replaced by ``dataset``;
    the data's name, or the error this rank raised."""
    from dataclasses import replace

    from companion.core import get_profile
    from companion.ddp.cli import load_data_rank0_first

    try:
        return load_data_rank0_first(replace(get_profile("ci"), dataset=dataset)).name
    except (ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"
