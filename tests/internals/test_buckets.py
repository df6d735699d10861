"""Every step of DDP from scratch equals one process on the global batch (1, 2, 4 ranks),
evenly and unevenly split, on a model with tied, frozen and unused parameters and a buffer;
they match torch's DDP; no_sync saves all-reduces; bucket assignment."""
import pytest
import torch
from torch.nn import functional as F

from companion.internals import assign_buckets
from companion.runtime import launch

from .workers import LR, grads_of, params_of, quirky

pytestmark = pytest.mark.ch6

STEPS, GLOBAL, MICRO = 3, 24, 3


def global_batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL, 1, 28, 28, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g))
            for _ in range(STEPS)]


def reference(batches, unused=True):
    """One process, one model, a plain SGD step on each whole global batch."""
    net = quirky(unused)
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=LR)
    first = None
    for X, y in batches:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(X), y).backward()
        first = grads_of(net) if first is None else first
        opt.step()
    return first, params_of(net)


def assert_same(got, expected):
    for a, b in zip(got, expected, strict=True):
        if b is None:
            assert a is None, "a parameter that nobody used got a gradient"
        else:
            torch.testing.assert_close(a, b)


@pytest.fixture(scope="module")
def runs():
    from .workers import every_variant

    batches = global_batches()
    return batches, {p: launch(every_variant, p, batches, MICRO, backend="gloo", timeout=240)
                     for p in (1, 2, 4)}


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_every_step_equals_one_process_on_the_global_batch(runs, world_size):
    batches, results = runs
    expected, expected_used = reference(batches), reference(batches, unused=False)
    for rank, out in enumerate(results[world_size]):
        for key in [k for k in out if k not in ("errors", "accumulation")]:
            grads, params = out[key]
            want = expected_used if key[0] == "HookedDDP" or key == ("torch DDP", False) else expected
            assert_same(grads, want[0])  # the first step's averaged gradients
            assert_same(params, want[1])  # the parameters after STEPS steps
            assert_same(params, results[world_size][0][key][1])  # replicas identical
    # frozen: untouched and without gradient; unused by every rank: .grad stays None
    net = quirky()
    names = [n for n, _ in net.named_parameters()]
    grads = results[world_size][0]["BucketedDDP", 0.001, True][0]
    assert grads[names.index("frozen.weight")] is None and grads[names.index("unused")] is None
    assert "head.weight" not in names  # tied: one parameter, under its first name


@pytest.mark.parametrize("world_size", [2, 4])
def test_buckets_and_hooks_match_torch_ddp(runs, world_size):
    out = runs[1][world_size][0]
    torch_grads = out["torch DDP", True][0]
    assert_same(out["BucketedDDP", 25.0, False][0], torch_grads)
    assert_same(out["BucketedDDP", 0.001, False][0], torch_grads)
    assert_same(out["NaiveDDP", False][0], torch_grads)
    assert_same(out["HookedDDP", False][0], out["torch DDP", False][0])


def test_unused_parameters_raise_an_error_naming_them(runs):
    for out in runs[1][2]:
        for variant in ("HookedDDP", "BucketedDDP"):
            message = out["errors"][variant]
            assert "unused" in message and "find_unused_parameters=True" in message, message
            assert variant in message


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_no_sync_accumulation_equals_one_big_batch_with_one_allreduce_per_bucket(runs, world_size):
    batches, results = runs
    expected = reference(batches, unused=False)[1]
    tensors = sum(1 for p in quirky(False).parameters() if p.requires_grad)
    for out in results[world_size]:
        acc = out["accumulation"]
        for params, _, _ in acc.values():
            assert_same(params, expected)
        _, with_sync, buckets = acc["BucketedDDP", True]
        _, without, _ = acc["BucketedDDP", False]
        assert buckets > 1 and with_sync == STEPS * buckets  # one per bucket per k micro-batches
        assert without == STEPS * MICRO * buckets  # every micro-batch communicates
        assert acc["HookedDDP", True][1] == STEPS * tensors
        assert acc["NaiveDDP", True][1] == STEPS * tensors


def test_bucket_assignment_reverses_order_respects_the_cap_and_isolates_big_parameters():
    mib = 2**20 // 4  # float32 elements in one MiB
    params = [torch.zeros(mib // 2), torch.zeros(mib // 4), torch.zeros(3 * mib),
              torch.zeros(mib // 2), torch.zeros(mib // 2), torch.zeros(mib // 4)]
    assert assign_buckets(params, 1.0) == [[5, 4], [3], [2], [1, 0]]
    assert assign_buckets(params, 100.0) == [[5, 4, 3, 2, 1, 0]]
    assert assign_buckets(params, 0.1) == [[5], [4], [3], [2], [1], [0]]
    mixed = [torch.zeros(4), torch.zeros(4, dtype=torch.float64), torch.zeros(4)]
    assert assign_buckets(mixed, 25.0) == [[2], [1], [0]]  # one dtype per flat buffer
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="bucket_cap_mb"):
            assign_buckets(params, bad)
