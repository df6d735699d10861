"""nanoGPT's gradient accumulation (issue 54, item 7): ``model.require_backward_grad_sync``
set by hand, ``False`` on every micro-step but the last, as torch's DDP reads it. Under each
method the micro-steps marked not to sync send no gradient (no all-reduce, no
reduce-scatter), and the steps equal one process on the global batch in float64 (a tied, a
frozen and an unused parameter, uneven shares) at world sizes 1, 2 and 4."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.verify import global_batches, one_process
from tests.sharding.workers import sync_attribute_worker

pytestmark = pytest.mark.ch9

K = 3  # micro-steps
METHODS = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3 prefetch", "ZeroRedundancyOptimizer"]
GRADIENTS = {"all-reduce", "reduce-scatter"}  # ZeRO-1's flags are all-reduced in step()


@pytest.fixture(scope="module")
def batches():
    return global_batches(2, 24)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", METHODS)
def test_micro_steps_marked_not_to_sync_send_no_gradient_and_the_steps_equal_one_process(
    batches, method, world_size
):
    ranks = launch(sync_attribute_worker, world_size, batches, method, K, timeout=300)
    want = one_process(batches, "Adam")
    for params, seen in ranks:
        torch.testing.assert_close(params, want, rtol=1e-9, atol=1e-12)
        *local, synced, stepped = seen
        assert len(local) == K - 1
        for counts in local:
            assert not GRADIENTS & set(counts), (method, seen)
        if world_size > 1:  # the step that syncs (or, ZeRO-1, its optimizer step) reduces
            assert GRADIENTS & {*synced, *stepped}, (method, seen)


PATTERNS = {  # (use_q in each micro-step, require_backward_grad_sync in each micro-step)
    "a layer used in the middle micro-step only": ((False, True, False), (False, False, True)),
    "a layer unused in the micro-step that syncs": ((True, True, False), (False, False, True)),
    "sync in the middle, then accumulate": ((True, False, True), (False, True, False)),
}


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", ["ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3 prefetch"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_accumulation_with_a_half_used_unit_equals_one_process(
    batches, pattern, method, world_size
):
    """A ZeRO-3 unit half used in one micro-step must not count as complete in the next (it
    was freed before its own backward had read its weights); and gradients accumulated after
    the micro-step that synced are sent by step(), not dropped."""
    from tests.sharding.workers import branchy_one_process, branchy_worker

    uses, syncs = PATTERNS[pattern]
    want = branchy_one_process(batches, len(uses), uses)
    for got in launch(branchy_worker, world_size, batches, method, uses, syncs, timeout=300):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
