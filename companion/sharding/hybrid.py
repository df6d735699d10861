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

FSDP2 does this on a two-dimensional mesh, ``init_device_mesh(type, (R, S),
mesh_dim_names=("replicate", "shard"))``, which :func:`~.library.fsdp2` builds
when given ``replicas=R`` (:func:`~.library.device_mesh`): parameters become
``DTensor``\\ s placed ``(Replicate(), Shard(0))``. :func:`split_bytes` prices a ledger of
one step that way, since the collectives' kinds tell the dimensions apart:
gathers and reduce-scatters run on the shard dimension, all-reduces on the
replicate one.
"""

from __future__ import annotations

from ..core.checks import check_int
from ..runtime.group import rank_device
from .ledger import count_bytes, ring_cost
from .library import fsdp2
from .training import full_parameters
from .verify import OPTIMIZERS, _model, _share_step

__all__ = ["split_bytes", "hsdp_worker"]


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


def hsdp_worker(rank: int, world_size: int, replicas: int, batches) -> dict:
    """Worker: HSDP (:func:`~.library.fsdp2` with ``replicas``) trains the chapter's model on the global
    ``batches`` (float64, each rank its share) with each optimizer of :data:`~.verify.OPTIMIZERS`;
    returns the whole parameters after the steps, the ledger of one SGD step, and where
    the first parameter's shards are placed."""
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
