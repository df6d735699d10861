"""HSDP (issue 37, item 5): FSDP2 on a (replicas, shards) DeviceMesh equals one process on
the global batch in float64, with the model's tied, frozen and unused parameters and uneven
shares, for several mesh shapes of 2-4 ranks; the ledger of one step splits into bytes within
a replica (ZeRO-3's over S ranks) and across replicas (an all-reduce of 1/S of the gradient)."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.hybrid import hsdp_worker, split_bytes
from companion.sharding.ledger import ring_cost
from companion.sharding.verify import OPTIMIZERS, global_batches, one_process

pytestmark = pytest.mark.ch9


@pytest.mark.parametrize("world_size, replicas", [(4, 2), (2, 2), (2, 1), (3, 3)])
def test_hsdp_equals_one_process_and_sends_a_shard_across(world_size, replicas):
    batches = global_batches()
    runs = launch(hsdp_worker, world_size, replicas, batches, backend="gloo", timeout=300)
    shards = world_size // replicas
    for name in OPTIMIZERS:
        expected = one_process(batches, name)
        for got in runs:
            torch.testing.assert_close(got[name], expected, rtol=1e-9, atol=1e-12)
    out = runs[0]
    assert out["placements"] == ("R", "S(0)")
    calls = out["calls", "SGD momentum"]
    reduced = sum(b for kind, b in calls if kind == "all-reduce")  # the gradient shards
    B = out["grad bytes"]
    # 1/S of the gradient (over a replicate dimension of 1, too), give or take padding and
    # the unused parameter's 40 bytes
    assert abs(reduced - B / shards) <= 64 * shards
    sent = split_bytes(calls, replicas, shards)
    assert sent["across"] == pytest.approx(ring_cost("all-reduce", reduced, replicas)[1])
    if replicas == 1:
        assert sent["across"] == 0
    if shards == 1:
        assert sent["within"] == 0
    else:  # ZeRO-3 within the replica: two gathers and a reduce-scatter of about B
        assert sent["within"] == pytest.approx(3 * (shards - 1) / shards * B, rel=0.01)


def test_split_bytes_prices_each_kind_on_its_dimension():
    calls = [("all-gather", 1000), ("reduce-scatter", 1000), ("all-reduce", 500)]
    assert split_bytes(calls, 2, 2) == {"within": 1000.0, "across": 500.0}
    assert split_bytes(calls, 4, 1) == {"within": 0.0, "across": 750.0}
