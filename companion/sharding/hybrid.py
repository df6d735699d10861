"""HSDP: shard within a node, replicate across nodes, on a two-dimensional ``DeviceMesh``.

Used in: chapter 9.

ZeRO-3 over all ``N`` ranks sends every gather and reduce-scatter over all of
them, so on many nodes most of its bytes cross the slow links between nodes.
Hybrid sharding arranges the ranks as ``R`` replicas of ``S`` ranks each
(``N = R * S``; a replica is typically one node): each replica holds one
whole, sharded copy of the model, so the all-gathers and reduce-scatters stay
within it, and only the gradient shards are averaged across the replicas,
by an all-reduce of ``1/S`` of the gradient. Per rank and step, with ``B``
bytes of gradient:

* within a replica: ZeRO-3's gathers and reduce-scatter over ``S`` ranks;
* across replicas: ``2 (R - 1) / R * B / S`` bytes, where ZeRO-3 over all
  ``N`` ranks sends all of its ``3 (N - 1) / N * B`` over links that may cross.

By hand (:func:`hybrid_groups`, :func:`hybrid_step`), it is chapter 3's process groups:
one group per replica (its ``S`` ranks) and one per shard position (the ``R`` ranks that
hold the same shard). After backward, a reduce-scatter in the replica's group sums its ranks'
gradients into shards, an all-reduce in the shard position's group sums those shards over
the replicas, each rank steps its shard and an all-gather in the replica's group makes the
parameters whole again (ZeRO-2's pattern; ZeRO-3's gathers would add the forward's).

FSDP2 does this on a two-dimensional mesh, ``init_device_mesh(type, (R, S),
mesh_dim_names=("replicate", "shard"))``, which :func:`~.library.fsdp2` builds
when given ``replicas=R`` (:func:`~.library.device_mesh`): parameters become
``DTensor``\\ s placed ``(Replicate(), Shard(0))``. :func:`split_bytes` prices a ledger of
one step that way, since the collectives' kinds tell the dimensions apart:
gathers and reduce-scatters run on the shard dimension, all-reduces on the
replicate one.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..core.checks import check_int
from ..core.compat import all_gather_single, reduce_scatter_single
from ..runtime.group import rank_device
from .flat import FlatShards, check_sharding_group
from .ledger import count_bytes, ring_cost
from .library import fsdp2
from .training import full_parameters
from .verify import OPTIMIZERS, _model, _share_loss, _share_step

__all__ = ["split_bytes", "hybrid_groups", "hybrid_step", "hsdp_by_hand_worker", "hsdp_worker"]


def split_bytes(calls: list[tuple[str, int]], replicas: int, shards: int) -> dict[str, float]:
    """Bytes one rank sends within its replica and across replicas, for a ledger's
    ``calls`` of HSDP on a ``(replicas, shards)`` mesh (chapter 3's ring costs)."""
    check_int(replicas, "replicas")
    check_int(shards, "shards")
    out = {"within": 0.0, "across": 0.0}
    for kind, nbytes in calls:
        across = kind in ("all-reduce", "broadcast")
        _, sent = ring_cost(kind, nbytes, replicas if across else shards)
        out["across" if across else "within"] += sent
    return out


def _check_replicas(replicas: int) -> tuple[int, int]:
    rank, n = check_sharding_group("hybrid_groups")
    check_int(replicas, "replicas", 1, "the number of replicas (nodes)", n)
    if n % replicas:
        raise ValueError(f"replicas must divide the world size {n}, got {replicas}")
    return rank, n


def hybrid_groups(replicas: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
    """``(replica group, shard group)`` of this rank: rank ``r`` is shard ``r % S`` of
    replica ``r // S``. Every rank creates every group, in the same order."""
    rank, n = _check_replicas(replicas)
    S = n // replicas
    within = [dist.new_group(list(range(r * S, (r + 1) * S))) for r in range(replicas)]
    across = [dist.new_group(list(range(s, n, S))) for s in range(S)]  # who holds shard s
    return within[rank // S], across[rank % S]


def hybrid_step(layout: FlatShards, shard: torch.Tensor, optimizer, groups) -> None:
    """After backward: average the gradient over all ranks into this rank's ``shard`` of
    ``layout`` (a gradient ``None`` counts as zeros), step it, gather the whole parameters."""
    within, across = groups
    grad = torch.empty_like(shard)
    reduce_scatter_single(grad, layout.flat_grad(), group=within)  # sum over the replica
    dist.all_reduce(grad, group=across)  # ... and over the replicas: all N ranks
    shard.grad = grad / dist.get_world_size()
    optimizer.step()
    optimizer.zero_grad()
    whole = layout.empty()
    all_gather_single(whole, shard.detach(), group=within)
    for p, value in zip(layout.params, layout.views(whole)):
        p.data.copy_(value)
        p.grad = None


def hsdp_by_hand_worker(rank: int, world_size: int, replicas: int, batches) -> dict:
    """Worker: :func:`hybrid_step` on :func:`hybrid_groups` trains the chapter's model on the
    global ``batches`` (float64, each rank its share) with each optimizer of
    :data:`~.verify.OPTIMIZERS`: the whole parameters after the steps, one step's ledger."""
    groups, S, out = hybrid_groups(replicas), world_size // replicas, {}
    for name, (cls, hp) in OPTIMIZERS.items():
        net = _model().to(rank_device())
        layout = FlatShards([p for p in net.parameters() if p.requires_grad], S, rank % S)
        shard = layout.shard(layout.flatten([p.detach() for p in layout.params])).clone()
        optimizer = cls([shard.requires_grad_()], **hp)
        for i, (X, y) in enumerate(batches):
            with count_bytes() as ledger:
                _share_loss(net, X.to(shard.device), y.to(shard.device)).backward()
                hybrid_step(layout, shard, optimizer, groups)
            if i == 0:
                out["calls", name] = ledger.calls
        out[name] = torch.cat([p.detach().reshape(-1).cpu() for p in layout.params])
    return out


def hsdp_worker(rank: int, world_size: int, replicas: int, batches) -> dict:
    """Worker: HSDP (:func:`~.library.fsdp2` with ``replicas``) trains the chapter's model on
    the global ``batches`` (float64, each rank its share) with each optimizer of
    :data:`~.verify.OPTIMIZERS`; returns the whole parameters after the steps, the ledger of
    one SGD step, and where the first parameter's shards are placed."""
    device, out = rank_device(), {}
    for name, (cls, hp) in OPTIMIZERS.items():
        net, opt = fsdp2(_model().to(device), cls, replicas=replicas, **hp)
        for i, (X, y) in enumerate(batches):
            with count_bytes() as ledger:
                _share_step(net, opt, X.to(device), y.to(device))
            if i == 0:
                out["calls", name] = ledger.calls
        out[name] = full_parameters(net, opt)
    first = next(net.parameters())
    out["placements"] = tuple(str(p) for p in first.placements)
    out["local numel"] = first.to_local().numel()
    out["grad bytes"] = sum(
        p.numel() * p.element_size() for p in _model().parameters() if p.requires_grad
    )
    return out
