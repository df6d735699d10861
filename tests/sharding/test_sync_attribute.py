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
