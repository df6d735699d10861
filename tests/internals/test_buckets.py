"""Step 3, buckets: equal one process on the global batch (1, 2, 4 ranks, even and uneven
shares, two bucket sizes) on a model with tied, frozen and unused parameters and a buffer; match
torch's DDP; no_sync makes one all-reduce per bucket per k micro-batches; bucket assignment."""

import pytest
import torch

from companion.internals import assign_buckets

from .workers import MICRO, STEPS, assert_replicas_equal_reference, assert_same, quirky, reference

pytestmark = pytest.mark.ch6


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("uneven", [False, True])
def test_buckets_equal_one_process_on_the_global_batch(runs, world_size, uneven):
    batches, results = runs
    for cap in (25.0, 0.001):  # one bucket; one bucket per tensor
        key = ("BucketedDDP", cap, uneven)
        assert_replicas_equal_reference(results[world_size], key, reference(batches))
    # frozen: no gradient; unused by every rank: .grad stays None; tied: one name
    names = [n for n, _ in quirky().named_parameters()]
    grads = results[world_size][0]["BucketedDDP", 0.001, uneven][0]
    assert grads[names.index("frozen.weight")] is None and grads[names.index("unused")] is None
    assert "head.weight" not in names


@pytest.mark.parametrize("world_size", [2, 4])
def test_buckets_match_torch_ddp(runs, world_size):
    out = runs[1][world_size][0]
    for cap in (25.0, 0.001):
        assert_same(out["BucketedDDP", cap, False][0], out["torch DDP", True][0])
        assert_same(out["BucketedDDP", cap, False][1], out["torch DDP", True][1])


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_no_sync_accumulation_equals_one_big_batch_with_one_allreduce_per_bucket(runs, world_size):
    batches, results = runs
    expected = reference(batches, unused=False)[1]
    tensors = sum(1 for p in quirky(False).parameters() if p.requires_grad)
    for out in results[world_size]:
        acc = out["accumulation"]
        for key, value in acc.items():
            if "explicit" not in key:  # those are checked in test_naive.py
                assert_same(value[0], expected)
        _, with_sync, buckets = acc["BucketedDDP", True]
        _, without, _ = acc["BucketedDDP", False]
        assert buckets > 1 and with_sync == STEPS * buckets  # one per bucket per k micro-batches
        assert without == STEPS * MICRO * buckets  # every micro-batch communicates
        assert acc["HookedDDP", True][1] == STEPS * tensors
        assert acc["NaiveDDP", True][1] == STEPS * tensors


def test_bucket_assignment_reverses_the_order_and_closes_a_bucket_at_the_cap(device):
    mib = 2**20 // 4  # float32 elements in one MiB

    def zeros(*shape, dtype=torch.float32):
        return torch.zeros(*shape, dtype=dtype, device=device)

    params = [
        zeros(mib // 2),
        zeros(mib // 4),
        zeros(3 * mib),
        zeros(mib // 2),
        zeros(mib // 2),
        zeros(mib // 4),
    ]
    assert assign_buckets(params, 1.0) == [[5, 4, 3], [2], [1, 0]]  # closed once >= 1 MiB
    assert assign_buckets(params, 100.0) == [[5, 4, 3, 2, 1, 0]]
    assert assign_buckets(params, 0.1) == [[5], [4], [3], [2], [1], [0]]
    big_last = [zeros(3 * mib), zeros(mib // 4)]
    assert assign_buckets(big_last, 1.0) == [[1, 0]]  # a parameter above the cap closes its bucket
    for cap in (0.1, 1.0, 5.0):  # every bucket exceeds the cap by at most its last parameter
        for group in assign_buckets(params, cap):
            assert sum(params[i].numel() * 4 for i in group[:-1]) < cap * 2**20
    mixed = [zeros(4), zeros(4, dtype=torch.float64), zeros(4)]
    assert assign_buckets(mixed, 25.0) == [[2], [1], [0]]  # one dtype per flat buffer
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="bucket_cap_mb"):
            assign_buckets(params, bad)
