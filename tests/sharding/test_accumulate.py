"""Gradient accumulation under FSDP2 (issue 37): each setting of its two setters equals one
process on the global batch in float64 (tied, frozen and unused parameters, uneven shares);
the bytes per micro-step and the tensor bytes held between micro-steps are what the setters
promise; sync left off for the last micro-step changes nothing, silently, and is caught."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.accumulate import ACCUMULATION, NEVER_SYNCED, accumulation_worker
from companion.sharding.verify import global_batches, one_process

pytestmark = pytest.mark.ch9

K = 4  # micro-steps


@pytest.fixture(scope="module", params=[1, 2, 3])
def run(request):
    batches = global_batches(2, 24)
    ranks = launch(accumulation_worker, request.param, batches, K, backend="gloo", timeout=300)
    return request.param, batches, ranks


def test_every_setting_equals_one_process_and_the_pitfall_changes_nothing(run):
    _, batches, ranks = run
    trained, untouched = one_process(batches, "SGD momentum"), one_process([], "SGD momentum")
    for out in ranks:
        for name in ACCUMULATION:
            torch.testing.assert_close(out[name], trained, rtol=1e-9, atol=1e-12)
            assert out[name, "caught"] is None
        assert torch.equal(out[NEVER_SYNCED], untouched)
        assert out[NEVER_SYNCED, "caught"].startswith(
            "GradientsNotReduced: no parameter has a gradient"
        )
        assert "set_requires_gradient_sync(True)" in out[NEVER_SYNCED, "caught"]


def test_what_each_setting_sends_per_micro_step(run):
    world_size, _, ranks = run
    out = ranks[0]
    every, last, kept = (out[name, "sent"] for name in ACCUMULATION)
    if world_size == 1:
        assert every == last == kept == [0] * K
        return
    assert every == [every[0]] * K  # two gathers and a reduce-scatter, every micro-step
    assert last[:-1] == [last[0]] * (K - 1) and 0 < last[0] < every[0]  # no reduce-scatter
    assert last[-1] == every[-1]
    assert kept[0] == last[0] and kept[1:-1] == [last[0] / 2] * (K - 2)  # no forward gather
    assert kept[-1] == every[-1] - last[0] / 2


def test_what_each_setting_holds_between_micro_steps(run):
    world_size, _, ranks = run
    out = ranks[0]
    every, last, kept = (out[name, "held"] for name in ACCUMULATION)
    whole = out["grad bytes"]  # the whole gradient
    assert every == [every[0]] * K and last[-1] == kept[-1] == every[0]  # sharded gradients
    assert last[:-1] == [whole] * (K - 1)  # the whole gradient, accumulated
    if world_size > 1:
        assert every[0] < whole
    for held in kept[:-1]:  # whole gradients and whole parameters (the frozen layer's too)
        assert held > 2 * whole
