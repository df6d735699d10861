"""Activation checkpointing (issue 37): what autograd keeps after forward is counted to the
byte, with and without recomputation; recomputation changes no gradient (float64, bit for
bit) and, under FSDP2, still equals one process (tied, frozen and unused parameters,
uneven shares) at 1-3 ranks; its time is a paired ratio with a spread."""

import pytest
import torch
from torch.nn import functional as F

from companion.core.noise import Ratio
from companion.runtime import launch
from companion.sharding.activations import (
    expanding_mlp,
    recompute,
    recompute_cost,
    recompute_worker,
)
from companion.sharding.memory import saved_bytes
from companion.sharding.verify import OPTIMIZERS, global_batches, one_process

pytestmark = pytest.mark.ch9

B, W, D = 8, 24, 3  # batch, width, blocks


def _net(recomputed: bool):
    torch.manual_seed(0)
    net = expanding_mlp(W, D).double()
    return recompute(net) if recomputed else net


def test_what_autograd_keeps_is_counted_to_the_byte():
    X = torch.randn(B, 1, 28, 28, dtype=torch.float64)
    plain, recomputed = saved_bytes(_net(False), X), saved_bytes(_net(True), X)
    per_sample = 28 * 28 + W  # the input, the first ReLU's output: kept either way
    # a plain block keeps its 4W-wide hidden output and its W-wide output (the next input)
    assert plain["activations"] == 8 * B * (per_sample + D * 5 * W)
    assert recomputed["activations"] == 8 * B * (per_sample + D * W)  # inputs only
    # every weight whose layer's input needs a gradient (not the first layer's) is kept
    weights = sum(m.weight.numel() for m in _net(False).modules() if hasattr(m, "weight"))
    assert plain["weights"] == 8 * (weights - 28 * 28 * W)
    assert recomputed["weights"] == 0  # recomputed with the forward in backward


def test_recomputation_changes_no_gradient():
    X = torch.randn(B, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 12, (B,))
    grads = []
    for recomputed in (False, True):
        net = _net(recomputed)
        F.cross_entropy(net(X), y).backward()
        grads.append([p.grad for p in net.parameters()])
    assert len(grads[0]) == len(grads[1]) == 2 * (2 + 2 * D)
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_fsdp2_with_recomputed_units_equals_one_process(world_size):
    batches = global_batches(2, 11)
    ranks = launch(recompute_worker, world_size, batches, backend="gloo", timeout=300)
    for name in OPTIMIZERS:
        expected = one_process(batches, name)
        for out in ranks:
            torch.testing.assert_close(out[name], expected, rtol=1e-9, atol=1e-12)


def test_the_cost_is_measured_on_both_sides_with_a_spread():
    out = recompute_cost(16, rounds=2, width=12, depth=2)
    assert out["recomputed"]["activations"] < out["plain"]["activations"]
    assert isinstance(out["time"], Ratio) and out["time"].rounds == 2
