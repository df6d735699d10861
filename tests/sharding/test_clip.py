"""Clipping by the global norm (issue 37, item 1): every method, with the package's
clip_grad_norm between backward and step, equals one process with torch's clip_grad_norm_ on
the global batch, in float64, at world sizes 1-4 with uneven local shares, on the model with a
tied weight, a frozen layer, an unused parameter and flat sizes that do not divide."""

import pytest
import torch
from torch.nn import functional as F

from companion.runtime import launch
from companion.sharding.training import METHODS
from companion.sharding.verify import (
    OPTIMIZERS,
    _model,
    clip_norm_worker,
    compare_worker,
    global_batches,
    one_process,
)

pytestmark = pytest.mark.ch9
MAX_NORM = 0.1  # the unclipped norms are near 0.3: every step is clipped


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_clipped_training_equals_one_process_with_torch_s_clip(world_size):
    batches = global_batches()
    runs = launch(
        compare_worker, world_size, batches, max_grad_norm=MAX_NORM, backend="gloo", timeout=300
    )
    for optimizer in OPTIMIZERS:
        expected = one_process(batches, optimizer, MAX_NORM)
        assert not torch.allclose(expected, one_process(batches, optimizer))  # clipping bit
        for rank, got in enumerate(runs):
            for method in METHODS:
                torch.testing.assert_close(
                    got[method, optimizer],
                    expected,
                    rtol=1e-9,
                    atol=1e-12,
                    msg=lambda m: f"{method}, {optimizer}, rank {rank}: {m}",
                )


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_norm_is_the_global_one_and_torch_s_function_misses_it_on_the_stages(world_size):
    batches = global_batches()
    X, y = batches[0]
    net = _model()
    F.cross_entropy(net(X), y).backward()
    whole = float(
        torch.nn.utils.get_total_norm([p.grad for p in net.parameters() if p.grad is not None])
    )
    for rank, out in enumerate(
        launch(clip_norm_worker, world_size, batches, backend="gloo", timeout=300)
    ):
        for method in METHODS:
            assert out[method, False] == pytest.approx(whole, rel=1e-12), (method, rank)
        for method in ("DDP", "ZeroRedundancyOptimizer", "FSDP2"):  # torch's own: right
            assert out[method, True] == pytest.approx(whole, rel=1e-12), (method, rank)
        for method in ("ZeRO-2", "ZeRO-3", "ZeRO-3 prefetch"):  # the shards hold the gradient
            assert out[method, True] == 0.0, (method, rank)
        if world_size > 1:  # ZeRO-1: each rank's own gradient, not yet averaged
            assert out["ZeRO-1", True] != pytest.approx(whole, rel=1e-6), rank
