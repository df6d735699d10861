"""Step 2, one hook and async all-reduce per parameter: equals one process on the global batch
and torch's DDP; one all-reduce per tensor per (accumulated) step; unused parameters named."""

import pytest

from companion.internals import trainable_parameters

from .workers import STEPS, assert_replicas_equal_reference, assert_same, quirky, reference

pytestmark = pytest.mark.ch6


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("uneven", [False, True])
def test_hooks_equal_one_process_on_the_global_batch(runs, world_size, uneven):
    batches, results = runs
    want = reference(batches, unused=False)
    assert_replicas_equal_reference(results[world_size], ("HookedDDP", uneven), want)


@pytest.mark.parametrize("world_size", [2, 4])
def test_hooks_match_torch_ddp(runs, world_size):
    out = runs[1][world_size][0]
    assert_same(out["HookedDDP", False][0], out["torch DDP", False][0])
    assert_same(out["HookedDDP", False][1], out["torch DDP", False][1])


def test_hooks_launch_one_allreduce_per_tensor_per_step_with_no_sync(runs):
    tensors = len(trainable_parameters(quirky(False)))
    for out in runs[1][2]:
        assert out["accumulation"]["HookedDDP", True][1] == STEPS * tensors
