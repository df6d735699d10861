"""The library versions: ``ZeroRedundancyOptimizer`` (ZeRO-1) and FSDP2's ``fully_shard``.

Used in: chapter 9.

* :func:`zero_redundancy` is torch's ZeRO-1: the model in DDP (whole
  parameters, gradients all-reduced) and
  ``torch.distributed.optim.ZeroRedundancyOptimizer``, which gives each rank
  whole parameters to own (not a flat slice), steps those, and broadcasts them.
* :func:`fsdp2` is torch's ZeRO-3: ``fully_shard`` applied to each unit
  (:func:`~.zero3.default_units`), then to the root, on :func:`device_mesh`: the
  process group seen as a one-dimensional mesh (``"cpu"`` with gloo, ``"cuda"``
  with nccl), or with ``replicas=R`` a ``(R, N / R)`` one, HSDP (:mod:`.hybrid`). Parameters become ``DTensor`` shards; forward and
  backward hooks gather and free them as :class:`~.zero3.Zero3` does.
  ``reshard_after_forward=True`` is ZeRO-3 (free after forward, gather again
  for backward); ``False`` keeps them gathered until backward, which is
  ZeRO-2's memory with ZeRO-3's code. ``mode`` bf16 becomes a
  ``MixedPrecisionPolicy``: bf16 copies for compute, fp32 gradients reduced.
  ``fully_shard`` refuses non-contiguous parameters (torch 2.11 to 2.14), so
  a channels-last model (the ``gpu`` profile's) is handed over with its
  weights made contiguous; its inputs may stay channels-last. A zero-size
  parameter is left out of the shards (``ignored_params``): it has nothing to
  shard, and FSDP2's reduce-scatter fails on its empty gradient.

Both broadcast rank 0's parameters and buffers first, as the hand-written
stages do, and return ``(model, optimizer)`` for the usual loop.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_int
from ..core.precision import MathMode
from ..internals.naive import broadcast_state, trainable_parameters
from .flat import check_sharding_group
from .scaler import check_precision
from .zero3 import default_units

__all__ = ["zero_redundancy", "fsdp2", "device_mesh", "mixed_precision_policy"]


def zero_redundancy(
    net: nn.Module, optimizer_class: type, find_unused_parameters: bool = False, **defaults: Any
) -> tuple[DDP, ZeroRedundancyOptimizer]:
    """``net`` in DDP and torch's ZeRO-1 optimizer over its trainable parameters."""
    check_sharding_group("zero_redundancy")
    device = next(net.parameters()).device
    ids = [device] if device.type == "cuda" else None
    model = DDP(net, device_ids=ids, find_unused_parameters=find_unused_parameters)
    model.register_comm_hook(None, allreduce_hook)  # torch's own, in Python: countable
    params = [p for _, p in trainable_parameters(net)]
    return model, ZeroRedundancyOptimizer(params, optimizer_class=optimizer_class, **defaults)


def mixed_precision_policy(mode: MathMode | None) -> MixedPrecisionPolicy:
    """FSDP2's policy for ``mode``: bf16 compute with fp32 reduction, or plain fp32."""
    check_precision(mode, "fsdp2")
    if mode is None or mode.dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=mode.dtype, reduce_dtype=torch.float32)


def device_mesh(device_type: str, replicas: int = 1) -> DeviceMesh:
    """The ranks as FSDP2's mesh: one dimension of all ``N``, or ``replicas`` groups of
    ``N / replicas`` ranks, named ``("replicate", "shard")``: each group holds one sharded
    copy (gathers and reduce-scatters within it), and the copies' gradient shards are
    all-reduced across the groups."""
    world_size = _check_mesh(replicas)
    if replicas == 1:
        return init_device_mesh(device_type, (world_size,))
    shape, names = (replicas, world_size // replicas), ("replicate", "shard")
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def _check_mesh(replicas: int) -> int:
    _, world_size = check_sharding_group("device_mesh")
    check_int(replicas, "replicas", 1, "the number of replicas (nodes)", world_size)
    if world_size % replicas:
        raise ValueError(
            f"replicas must divide the world size {world_size}, got {replicas}: every "
            f"replica needs the same number of ranks"
        )
    return world_size


def _check_fsdp2(net: nn.Module) -> None:
    check_sharding_group("fsdp2")
    if not any(True for _ in trainable_parameters(net)):
        raise ValueError("fsdp2: the model has no trainable parameters: nothing to shard")


def fsdp2(
    net: nn.Module,
    optimizer_class: type,
    units: list[nn.Module] | None = None,
    reshard_after_forward: bool = True,
    mode: MathMode | None = None,
    replicas: int = 1,
    **defaults: Any,
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """``fully_shard`` on each unit, then the root; an ordinary optimizer over the shards.
    ``replicas=R``: HSDP, sharded over ``N / R`` ranks and replicated ``R`` times."""
    _check_fsdp2(net)
    mesh = device_mesh(next(net.parameters()).device.type, replicas)
    broadcast_state(net)
    policy = mixed_precision_policy(mode)
    for p in net.parameters():
        if not p.is_contiguous():  # channels_last weights: FSDP2 shards flat, contiguous storage
            p.data = p.data.contiguous()
    # A zero-size parameter has nothing to shard or reduce, and FSDP2's reduce-scatter
    # fails on its empty gradient: it stays an ordinary tensor, the same on every rank.
    options = dict(
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=policy,
        ignored_params={p for p in net.parameters() if p.numel() == 0},
    )
    for unit in default_units(net) if units is None else units:
        fully_shard(unit, **options)
    fully_shard(net, **options)
    return net, optimizer_class([p for _, p in trainable_parameters(net)], **defaults)
