"""Mixed precision as FSDP2 does it (issue 37, item 3): the hand-written ZeRO-3 casts each
unit's shard to bf16 once, at gather time, so autograd saves the unit's own buffer, which
the unit frees after forward; under autocast alone autograd kept whole bf16 copies of every
weight until backward. Trained that way, ZeRO-3 ends where FSDP2 with its bf16 policy ends."""

import pytest
import torch

from companion.core import load_data
from companion.runtime import WorkerError, launch
from companion.sharding import METHODS
from companion.sharding.measure import divisible_mlp, saved_weights_worker
from companion.sharding.memory import saved_weight_bytes
from companion.study import subset

from .workers import mixed_worker, overflow_worker, several, unresharded_worker

pytestmark = pytest.mark.ch9


def test_the_measure_sees_weights_autograd_saved_and_nothing_else():
    """One process, no sharding: autocast saves a bf16 copy of each weight whose input
    needs a gradient (every Linear but the first): 2 bytes per weight number."""
    net = divisible_mlp(96, 4)
    X = torch.randn(8, 1, 28, 28)
    weights = [m.weight for m in net if isinstance(m, torch.nn.Linear)][1:]
    copies = sum(2 * w.numel() for w in weights)
    assert saved_weight_bytes(net, X, torch.autocast("cpu", dtype=torch.bfloat16)) == copies
    assert saved_weight_bytes(net, X) == 2 * copies  # the fp32 parameters themselves
    with torch.no_grad():
        assert saved_weight_bytes(net, X) == 0  # nothing saved without a graph


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_cast_at_gather_holds_no_saved_weights_after_forward(world_size):
    held = launch(saved_weights_worker, world_size, backend="gloo", timeout=300)
    net = divisible_mlp(96, 4)
    copies = sum(2 * m.weight.numel() for m in list(net)[2:] if isinstance(m, torch.nn.Linear))
    for rank in held:
        assert rank == {
            "ZeRO-3, autocast only": copies,  # whole copies on every rank, whatever N
            "ZeRO-3, cast at gather": 0,
            "FSDP2, cast at gather": 0,
        }


def test_fsdp2_without_resharding_after_forward_holds_its_bf16_weights():
    """The measure can see FSDP2's weights: kept gathered after forward, they are held."""
    held = launch(unresharded_worker, 2, backend="gloo", timeout=300)
    net = divisible_mlp(96, 4)
    copies = sum(2 * m.weight.numel() for m in list(net)[2:] if isinstance(m, torch.nn.Linear))
    assert held == [copies, copies]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_zero3_cast_at_gather_trains_as_fsdp2_with_its_bf16_policy(world_size):
    """bf16 forward and backward, fp32 reduce-scatter, fp32 master shards: the same numbers
    as FSDP2, bit for bit where dividing by N is exact (N = 1, 2, 4); at N = 3 where the
    division happens (each gradient, or the sum) changes the last bit of fp32 sums."""
    for rank, run in enumerate(launch(mixed_worker, world_size, backend="gloo", timeout=300)):
        ours, theirs = run["ZeRO-3"], run["FSDP2"]
        assert ours.dtype == theirs.dtype == torch.float32  # the master copies
        if world_size in (1, 2, 4):
            assert torch.equal(ours, theirs), rank
        else:
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("world_size", [2, 3])
def test_an_overflow_in_one_ranks_shard_makes_every_rank_skip_the_step(world_size):
    """fp16: the inf is in the last rank's shard only; the all-reduced flag has every rank
    skip that step and halve its scale, so the replicas stay one; the next step is taken."""
    methods = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2")
    runs = launch(overflow_worker, world_size, methods, backend="gloo", timeout=300)
    for method in methods:
        assert [run[method]["local"] for run in runs] == [False] * (world_size - 1) + [True]
        for rank, run in enumerate(runs):
            got = run[method]
            assert got["scale"] == 512.0, (method, rank)
            assert got["step 1 skipped"] and got["step 2 taken"], (method, rank)
            assert torch.equal(got["params"], runs[0][method]["params"]), (method, rank)


def test_torchs_plain_grad_scaler_agrees_under_fsdp2_and_cannot_see_the_stages_shards():
    """Chapter 9's claim: FSDP2's gradients are DTensors, and torch reduces the found-inf flag
    of ``_amp_foreach_non_finite_check_and_unscale_`` on them with MAX over the mesh, so a
    plain ``GradScaler`` skips the step on every rank. The hand-written stages keep their
    gradients in flat shards that torch's scaler does not find: it refuses to step."""
    runs = launch(overflow_worker, 2, ("FSDP2",), "plain", backend="gloo", timeout=300)
    fsdp2 = [run["FSDP2"] for run in runs]
    assert [r["local"] for r in fsdp2] == [False, True]  # the inf is in rank 1's shard only
    assert [r["step 1 skipped"] for r in fsdp2] == [True, True]
    assert [r["step 2 taken"] for r in fsdp2] == [True, True]
    assert [r["scale"] for r in fsdp2] == [512.0, 512.0]
    assert torch.equal(fsdp2[0]["params"], fsdp2[1]["params"])
    for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        with pytest.raises(WorkerError, match="No inf checks were recorded"):
            launch(overflow_worker, 2, (method,), "plain", backend="gloo", timeout=300)


def test_fp16_trains_every_method_within_the_stated_tolerance_of_fp32():
    """Chapter 5's loop in fp16 with the sharded scaler (CPU autocast): after the same steps
    the loss stays within 0.05 of fp32's, and the ranks agree."""
    small = subset(load_data("mnist-sample", verbose=False), 301, 101)
    options = dict(model="lenet", global_batch=32, lr=0.1, epochs=1, max_steps=6)
    runs = {
        p: launch(several, 2, small, METHODS, precision=p, **options, backend="gloo", timeout=300)
        for p in ("fp32", "fp16")
    }
    for k, method in enumerate(METHODS):
        fp16, fp32 = runs["fp16"][0][k], runs["fp32"][0][k]
        assert fp16.records[-1].precision == "fp16", method
        assert abs(fp16.records[-1].train_loss - fp32.records[-1].train_loss) < 0.05, method
        assert not torch.equal(fp16.params, fp32.params), method  # fp16 did compute
        torch.testing.assert_close(runs["fp16"][1][k].params, fp16.params, msg=method)
