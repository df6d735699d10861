"""Every sharded method behind one call: ``(model, optimizer) = shard(method, net, ...)``.

Used in: chapter 9.

:func:`shard` wraps a freshly built model (inside a process group) in one
of :data:`METHODS`; the result is driven by the ordinary loop, unchanged:
``loss = loss_fn(model(X), y); loss.backward(); optimizer.step();
optimizer.zero_grad()``. ``"DDP"`` is torch's DDP with a plain optimizer,
the replicated baseline. :func:`full_parameters` gathers the whole
parameters of any of them, to compare with one device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice
from ..core.precision import MathMode
from ..internals.naive import trainable_parameters
from .library import fsdp2, zero_redundancy
from .zero1 import Zero1, check_precision
from .zero2 import Zero2
from .zero3 import Zero3

__all__ = ["METHODS", "shard", "full_parameters"]

METHODS = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3 prefetch", "ZeroRedundancyOptimizer", "FSDP2")


def shard(
    method: str,
    net: nn.Module,
    optimizer_class: type = torch.optim.Adam,
    mode: MathMode | None = None,
    find_unused_parameters: bool = False,
    bucket_cap_mb: float = 25.0,
    **defaults: Any,
) -> tuple[nn.Module, Any]:
    """``net`` and its optimizer under ``method``; ``defaults`` go to ``optimizer_class``."""
    check_choice(method, "method", METHODS)
    check_precision(mode, method)
    if method == "DDP":
        device = next(net.parameters()).device
        ids = [device] if device.type == "cuda" else None
        model = DDP(net, device_ids=ids, find_unused_parameters=find_unused_parameters)
        model.register_comm_hook(None, allreduce_hook)  # torch's own, in Python: countable
        return model, optimizer_class([p for _, p in trainable_parameters(net)], **defaults)
    if method == "ZeRO-1":
        return net, Zero1(net, optimizer_class, **defaults)
    if method == "ZeRO-2":
        return net, Zero2(net, optimizer_class, bucket_cap_mb, **defaults)
    if method.startswith("ZeRO-3"):
        return net, Zero3(net, optimizer_class, prefetch="prefetch" in method, **defaults)
    if method == "ZeroRedundancyOptimizer":
        return zero_redundancy(net, optimizer_class, find_unused_parameters, **defaults)
    return fsdp2(net, optimizer_class, mode=mode, **defaults)


@torch.no_grad()
def full_parameters(model: nn.Module, optimizer: Any) -> torch.Tensor:
    """The trainable parameters, whole, flattened into one vector on the CPU."""
    if isinstance(optimizer, Zero3):
        whole = optimizer.full_parameters()
    else:
        net = model.module if isinstance(model, DDP) else model
        whole = [
            p.full_tensor() if isinstance(p, DTensor) else p.detach()
            for _, p in trainable_parameters(net)
        ]
    return torch.cat([t.reshape(-1).cpu() for t in whole])
