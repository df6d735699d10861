"""HSDP (issue 37, item 5): FSDP2 on a (replicas, shards) DeviceMesh equals one process on
the global batch in float64, with the model's tied, frozen and unused parameters and uneven
shares, for several mesh shapes of 2-4 ranks; the ledger of one step splits into bytes within
a replica (ZeRO-3's over S ranks) and across replicas (an all-reduce of 1/S of the gradient)."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.flat import padded_size
from companion.sharding.hybrid import hsdp_by_hand_worker, hsdp_worker, split_bytes
from companion.sharding.ledger import ring_cost
from companion.sharding.verify import OPTIMIZERS, global_batches, one_process

from .workers import uneven_mesh_worker

pytestmark = pytest.mark.ch9


def _equal_to_one_process(worker, world_size: int, replicas: int) -> list:
    """``worker``'s results on ``world_size`` ranks, each checked against one process."""
    batches = global_batches()
    runs = launch(worker, world_size, replicas, batches, backend="gloo", timeout=300)
    for name in OPTIMIZERS:
        expected = one_process(batches, name)
        for got in runs:
            torch.testing.assert_close(got[name], expected, rtol=1e-9, atol=1e-12)
    return runs


@pytest.mark.parametrize("world_size, replicas", [(4, 2), (2, 2), (2, 1), (3, 3)])
def test_hsdp_equals_one_process_and_sends_a_shard_across(world_size, replicas):
    out, shards = (
        _equal_to_one_process(hsdp_worker, world_size, replicas)[0],
        world_size // replicas,
    )
    calls = out["calls", "SGD momentum"]
    reduced = sum(b for kind, b in calls if kind == "all-reduce")  # the gradient shards
    B = out["grad bytes"]
    sent = split_bytes(calls, replicas, shards)
    if replicas == 1:  # plain FSDP2: a one-dimensional mesh, nothing reduced across
        assert out["placements"] == ("S(0)",) and reduced == 0 and sent["across"] == 0
    else:  # 1/S of the gradient, give or take padding and the unused parameter's 40 bytes
        assert out["placements"] == ("R", "S(0)")
        assert abs(reduced - B / shards) <= 64 * shards
        assert sent["across"] == pytest.approx(ring_cost("all-reduce", reduced, replicas)[1])
    if shards == 1:
        assert sent["within"] == 0
    else:  # ZeRO-3 within the replica: every unit (the root too: fsdp2 reshards it after
        # forward) gathered twice and reduce-scattered once, about 3B with the frozen layer
        assert sent["within"] == pytest.approx(3 * (shards - 1) / shards * B, rel=0.03)


@pytest.mark.parametrize("world_size, replicas", [(4, 2), (2, 2), (2, 1), (3, 3), (3, 1)])
def test_hsdp_by_hand_on_process_groups_equals_one_process(world_size, replicas):
    runs, shards = (
        _equal_to_one_process(hsdp_by_hand_worker, world_size, replicas),
        world_size // replicas,
    )
    calls = runs[0]["calls", "SGD momentum"]
    numel = runs[0]["SGD momentum"].numel()  # the trainable numbers, float64
    shard = 8 * padded_size(numel, shards) // shards  # bytes of one rank's shard
    # a reduce-scatter and an all-gather of the whole in the replica; an all-reduce of the
    # shard across (a ledger counts each collective by its whole buffer)
    assert calls == [
        ("reduce-scatter", shards * shard),
        ("all-reduce", shard),
        ("all-gather", shards * shard),
    ]
    sent = split_bytes(calls, replicas, shards)
    assert sent["across"] == ring_cost("all-reduce", shard, replicas)[1]
    assert sent["within"] == 2 * (shards - 1) * shard


def test_split_bytes_prices_each_kind_on_its_dimension():
    calls = [("all-gather", 1000), ("reduce-scatter", 1000), ("all-reduce", 500)]
    assert split_bytes(calls, 2, 2) == {"within": 1000.0, "across": 500.0}
    assert split_bytes(calls, 4, 1) == {"within": 0.0, "across": 750.0}


def test_replicas_that_do_not_divide_the_ranks_are_refused_before_any_collective():
    got = launch(uneven_mesh_worker, 3, 2, backend="gloo", timeout=120)  # FSDP2's, by hand
    assert all(len(g) == 2 for g in got)
    assert all(e.startswith("replicas must divide the world size 3, got 2") for g in got for e in g)
