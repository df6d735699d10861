"""FSDP2's silent pitfalls (issue 37, item 4): each mistake, made on every rank of a real run
at world sizes 1-4, shows its symptom and its detector catches it; the correct script passes
the same detector. The detectors' verdicts on evidence made by hand are tested too, so that a
detector that never fires (or always fires) fails here."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.pitfalls import (
    GradientsMisscaled,
    ReducedInLowPrecision,
    check_gradient_scale,
    check_reduce_dtype,
    pitfalls_worker,
)

from .workers import same_start_worker

pytestmark = pytest.mark.ch9


@pytest.fixture(scope="module", params=[1, 2, 3, 4])
def run(request):
    world_size = request.param
    return world_size, launch(pitfalls_worker, world_size, backend="gloo", timeout=300)


def test_ranks_seeded_apart_make_a_patchwork_that_check_same_start_names(run):
    world_size, ranks = run
    for out in ranks:
        if world_size == 1:
            assert out["apart: caught"] is None
            assert out["apart: the model one process builds"]
        else:
            apart = list(range(1, world_size))
            assert out["apart: caught"].startswith(
                f"ReplicasOutOfSync: the models of ranks {apart} differ from rank 0's before sharding"
            )
            assert "torch.manual_seed" in out["apart: caught"]
            assert not out["apart: the model one process builds"]


def test_dividing_the_loss_by_the_world_size_is_caught(run):
    world_size, ranks = run
    for out in ranks:
        one = out["norm", "one process"]
        torch.testing.assert_close(out["norm", False], one, rtol=1e-12, atol=0)
        torch.testing.assert_close(out["norm", True], one / world_size, rtol=1e-12, atol=0)
        check_gradient_scale(out["norm", False], one, world_size)  # the right loss passes
        if world_size > 1:
            with pytest.raises(GradientsMisscaled, match=f"1/{world_size} of one process"):
                check_gradient_scale(out["norm", True], one, world_size)


def test_a_bf16_reduction_is_caught_and_an_fp32_one_is_not(run):
    world_size, ranks = run
    for out in ranks:
        if world_size == 1:
            assert out["reduce", "None"] == out["reduce", "torch.float32"] == "1 rank"
        else:
            assert out["reduce", "None"].startswith("ReducedInLowPrecision: every one of")
            assert "reduce_dtype=torch.float32" in out["reduce", "None"]
            assert out["reduce", "torch.float32"] is None
            # the ledger sees it directly: gathers in bf16 both ways, the reduction in the policy's
            assert out["dtypes", "None"] == {
                "all-gather": ["bfloat16"],
                "reduce-scatter": ["bfloat16"],
            }
            assert out["dtypes", "torch.float32"]["reduce-scatter"] == ["float32"]
            assert out["dtypes", "torch.float32"]["all-gather"] == ["bfloat16"]


def test_a_full_state_dict_needs_set_model_state_dict(run):
    _, ranks = run
    for out in ranks:
        assert out["load_state_dict"].startswith("RuntimeError: ")
        assert "DTensor" in out["load_state_dict"]
        assert out["load_full_state_dict: equal"]


def test_check_gradient_scale_reads_the_ratio():
    check_gradient_scale(2.0, 2.0, 4)
    with pytest.raises(GradientsMisscaled, match="1/4 of one process's: the loss was divided"):
        check_gradient_scale(0.5, 2.0, 4)
    with pytest.raises(GradientsMisscaled, match="4 times one process's: .* summed"):
        check_gradient_scale(8.0, 2.0, 4)
    with pytest.raises(GradientsMisscaled, match="1.5 times one process's"):
        check_gradient_scale(3.0, 2.0, 4)


def test_check_reduce_dtype_reads_the_bits():
    g = torch.Generator().manual_seed(0)
    fp32 = [torch.randn(40, generator=g), torch.randn(60, generator=g)]
    check_reduce_dtype(fp32, 2)  # random fp32 values are not bf16 numbers
    with pytest.raises(ReducedInLowPrecision, match="every one of the 100 gradient values"):
        check_reduce_dtype([t.bfloat16().float() for t in fp32], 2)
    fp16 = [t.half().float() for t in fp32]
    check_reduce_dtype(fp16, 2)  # fp16 numbers have 11 bits: most are not bf16 numbers
    with pytest.raises(ReducedInLowPrecision, match="torch.float16"):
        check_reduce_dtype(fp16, 2, torch.float16)


@pytest.mark.parametrize("world_size", [2, 3])
def test_check_same_start_passes_models_built_alike(world_size):
    assert (
        launch(same_start_worker, world_size, False, backend="gloo", timeout=120)
        == [None] * world_size
    )
    caught = launch(same_start_worker, world_size, True, backend="gloo", timeout=120)
    assert all(
        c.startswith(f"the models of ranks {list(range(1, world_size))} differ") for c in caught
    )
