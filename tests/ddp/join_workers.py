"""Workers for tests/ddp/test_join.py: chapter 5's train_uneven around chapter 6's wrappers and
chapter 9's stages (the tests may import every chapter; the package's chapter 5 may not)."""

from __future__ import annotations

import torch

from companion.ddp import train_uneven
from companion.ddp.join import OPTIMIZERS
from companion.internals import TiedFrozenUnused
from companion.internals.training import wrap
from companion.sharding import full_parameters, shard


def uneven_worker(rank: int, world_size: int, shares, method: str, optimizer: str) -> torch.Tensor:
    """Train the awkward model (float64) with ``method`` (a wrapper of chapter 6 or a stage
    of chapter 9) on ``shares[rank]`` by ``train_uneven``; the whole parameters after."""
    torch.manual_seed(0)
    net = TiedFrozenUnused().double()
    cls, options = OPTIMIZERS[optimizer]
    if method in ("BucketedDDP", "torch DDP"):
        model = wrap(net, method, find_unused_parameters=True)
        opt = cls([p for p in net.parameters() if p.requires_grad], **options)
    else:
        model, opt = shard(method, net, cls, find_unused_parameters=True, **options)
    X, y = next(b for batches in shares for b in batches)
    train_uneven(model, opt, shares[rank], (X[:0], y[:0]))
    return full_parameters(model, opt)
