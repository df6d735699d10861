"""``nn.SyncBatchNorm``: BatchNorm statistics over the global batch, across processes.

Used in: chapter 5 (chapter 2 measured what per-device statistics change).

Under DDP each process normalises with the mean and variance of its own
share of the batch, as ``nn.DataParallel`` does per GPU. ``SyncBatchNorm``
all-reduces the statistics, so every process normalises with those of the
global batch. PyTorch implements it for GPUs only: inside a process group,
``DistributedDataParallel`` refuses it on a CPU module (``ValueError``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.training import set_seed
from ..runtime.group import rank_device

__all__ = ["batchnorm_statistics"]


def batchnorm_statistics(rank: int, world_size: int, X: torch.Tensor, sync: bool) -> dict:
    """Worker: one training forward of Conv2d + BatchNorm2d on this rank's share of ``X``.

    Returns the BatchNorm's running mean after the step (on the CPU), or, if
    torch refuses, the error it raised. With ``sync`` the BatchNorm is
    converted to ``SyncBatchNorm`` first.
    """
    device = rank_device()
    set_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, kernel_size=3), nn.BatchNorm2d(4))
    if sync:
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    share = X.chunk(world_size)[rank].to(device)
    try:  # DDP refuses SyncBatchNorm on a CPU module before any forward
        net = DDP(net.to(device), device_ids=[device] if device.type == "cuda" else None)
        net(share)
    except ValueError as err:
        return {"error": f"{type(err).__name__}: {err}"}
    return {"running_mean": net.module[1].running_mean.cpu()}
