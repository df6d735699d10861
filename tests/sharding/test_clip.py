"""Clipping by the global norm (issue 37, item 1): every method, with the package's
clip_grad_norm between backward and step, equals one process with torch's clip_grad_norm_ on
the global batch, in float64, at world sizes 1-4 with uneven local shares, on the model with a
tied weight, a frozen layer, an unused parameter and flat sizes that do not divide."""

import math

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
            assert out[method, True] == 0.0, (method, rank)  # torch's own function, unguarded
            assert "no parameter holds a .grad and torch would return 0" in out[method, "refused"]
        if world_size > 1:  # ZeRO-1: each rank's own gradient, not yet averaged
            assert out["ZeRO-1", True] != pytest.approx(whole, rel=1e-6), rank
        assert "each rank still holds its own gradient" in out["ZeRO-1", "refused"]
        for method in ("DDP", "ZeroRedundancyOptimizer", "FSDP2"):
            assert out[method, "refused"] is None, (method, rank)


def _clipped_one_process(batches, clip):
    from companion.sharding.training import full_parameters

    net = _model()
    cls, hp = OPTIMIZERS["SGD momentum"]
    opt = cls([p for p in net.parameters() if p.requires_grad], **hp)
    norms = []
    for X, y in batches:
        F.cross_entropy(net(X), y).backward()
        norms.append(float(clip(net.parameters()) or 0.0))
        opt.step()
        opt.zero_grad()
    return full_parameters(net, opt), norms


@pytest.fixture(scope="module")
def torch_clip_runs():
    from .workers import torch_clip_worker

    batches = global_batches()
    return batches, {
        n: launch(torch_clip_worker, n, batches, backend="gloo", timeout=300) for n in (1, 2, 4)
    }


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_torch_s_clipping_refuses_a_stage_s_parameters_and_names_the_call(
    torch_clip_runs, world_size
):
    """Issue 54, item 2: nanoGPT's torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    returned 0 and clipped nothing under ZeRO-2/3, and clipped each rank's own gradient under
    ZeRO-1, in silence. It now raises, naming the stage's call; a plain model still clips."""
    _, runs = torch_clip_runs
    for rank, out in enumerate(runs[world_size]):
        for method, stage in (("ZeRO-1", "Zero1"), ("ZeRO-2", "Zero2"), ("ZeRO-3", "Zero3")):
            for name in ("clip_grad_norm_", "clip_grad_value_"):
                message = out[method, name]
                assert f"torch.nn.utils.{name} over the parameters of a model that {stage}" in (
                    message
                ), (method, rank, message)
                assert f"Call optimizer.{name}(...) between backward() and step()" in message
        assert out["plain"] > 0


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("kind", ["norm 2", "norm 1", "norm inf", "value"])
def test_the_stage_s_clipping_equals_torch_s_on_one_process(torch_clip_runs, world_size, kind):
    """The calls that replace torch's: clip_grad_norm_ of order 2, 1 and inf, and
    clip_grad_value_, on the averaged gradient, equal one process with torch's function."""
    from .workers import CLIPS

    batches, runs = torch_clip_runs
    expected, norms = _clipped_one_process(batches, CLIPS[kind][0])
    unclipped, _ = _clipped_one_process(batches, lambda ps: None)
    assert not torch.allclose(expected, unclipped)  # the clipping mattered
    for rank, out in enumerate(runs[world_size]):
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
            torch.testing.assert_close(
                out[method, kind], expected, rtol=1e-9, atol=1e-12, msg=lambda m: f"{method} {m}"
            )
            got = [out[method, kind, step] for step in range(len(batches))]
            assert got == pytest.approx(norms, rel=1e-9), (method, rank)


@pytest.mark.parametrize("world_size", [2, 4])
def test_a_nan_on_one_rank_makes_the_norm_nan_everywhere(world_size):
    """gloo's MAX may drop a NaN: the inf-norm all-reduces a NaN flag along."""
    from .workers import nan_norm_worker

    for out in launch(nan_norm_worker, world_size, backend="gloo", timeout=120):
        for norm_type in (2.0, math.inf):
            assert math.isnan(out[norm_type]), (norm_type, out)
            assert "is nan, so they cannot be clipped" in out[norm_type, "raised"]


def test_a_deleted_zero1_no_longer_refuses_torch_s_clipping():
    """The inner optimizer's step hook holds its stage weakly: once the stage is deleted,
    without a garbage collection, torch's function clips the model's own gradients."""
    import gc

    from torch import nn

    from companion.sharding import Zero1

    from .test_bad_input import in_group

    net = nn.Linear(3, 2)
    torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)  # the first optimizer of a process
    # imports torch._dynamo lazily, and that import keeps its callers' frames alive for good

    def run():
        opt = Zero1(net, torch.optim.SGD, lr=0.1)
        net(torch.ones(1, 3)).sum().backward()
        with pytest.raises(RuntimeError, match="a model that Zero1 shards"):
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        del opt
        return torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9)

    gc.disable()
    try:
        norm = in_group(run)
    finally:
        gc.enable()
    assert float(norm) > 0
