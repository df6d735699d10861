"""Chapter 5's loop drives every sharded method unchanged: after the same steps on the same
global batches, each ends where one process ends (fp32, LeNet, the sample data)."""

import pytest
import torch

from companion.core import load_data
from companion.ddp import train_reference_ddp
from companion.runtime import launch
from companion.sharding import METHODS
from companion.study import subset

from .workers import several

pytestmark = pytest.mark.ch9

GLOBAL_BATCH, LR, STEPS = 32, 0.1, 4


def _run(epochs=1, **extra):
    """Every method on 2 ranks, on 301 samples (odd: the sampler pads), and the options."""
    small = subset(load_data("mnist-sample", verbose=False), 301, 101)
    options = dict(model="lenet", global_batch=GLOBAL_BATCH, lr=LR, epochs=epochs, max_steps=STEPS)
    results = launch(several, 2, small, METHODS, **options, **extra, backend="gloo", timeout=300)
    return small, results


def test_the_loop_drives_every_method_like_one_process():
    small, results = _run(epochs=2)
    expected = train_reference_ddp(
        2, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=STEPS, model="lenet"
    )
    for rank in (0, 1):
        for method, got in zip(METHODS, results[rank]):
            torch.testing.assert_close(got.params, expected, msg=lambda m, v=method: f"{v}: {m}")
            assert [(r.method, r.n_devices) for r in got.records] == (
                [(method, 2)] if rank == 0 else []
            )
            assert all(0 <= r.test_acc <= 1 and r.precision == "fp32" for r in got.records)


def test_a_channels_last_model_trains_under_every_method_like_one_process():
    """The gpu profile stores weights channels-last; FSDP2 refuses such (non-contiguous)
    parameters, so ``fsdp2`` hands it contiguous ones. Found by ``make gpu-check`` (H200)."""
    small, results = _run(channels_last=True)
    expected = train_reference_ddp(
        2, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=STEPS, model="lenet"
    )
    for method, got in zip(METHODS, results[0]):
        torch.testing.assert_close(got.params, expected, msg=lambda m, v=method: f"{v}: {m}")
        assert [r.precision for r in got.records] == ["fp32, channels_last"]


def test_the_loop_clips_every_method_like_one_process():
    """``clip`` in chapter 5's loop: the step pre-hook clips with the stage's own global
    norm (the hand-written stages) or torch's (DDP, ZeroRedundancyOptimizer, FSDP2), and
    every method ends where one process that clips ends (float64)."""
    small, results = _run(precision="fp64", clip=0.05)
    same = dict(global_batch=GLOBAL_BATCH, lr=LR, steps=STEPS, model="lenet", precision="fp64")
    expected = train_reference_ddp(2, small, "ci", clip=0.05, **same)
    assert not torch.allclose(expected, train_reference_ddp(2, small, "ci", **same))
    for rank in (0, 1):
        for method, got in zip(METHODS, results[rank]):
            torch.testing.assert_close(got.params, expected, msg=lambda m, v=method: f"{v}: {m}")
