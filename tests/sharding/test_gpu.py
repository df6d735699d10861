"""The GPU path (skipped without GPUs): every method on GPUs under nccl, one GPU per rank,
equal to one process on the CPU in float64 (TF32 plays no part in float64)."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding import METHODS
from companion.sharding.verify import compare_worker, global_batches, one_process


def _check(world_size):
    batches = global_batches()
    runs = launch(compare_worker, world_size, batches, timeout=600)  # nccl: one GPU per rank
    for optimizer in ("Adam", "SGD momentum"):
        expected = one_process(batches, optimizer)
        for got in runs:
            for method in METHODS:
                torch.testing.assert_close(got[method, optimizer], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.ch9
@pytest.mark.gpu
def test_every_method_on_one_gpu_matches_one_process():
    _check(1)


@pytest.mark.ch9
@pytest.mark.multigpu
def test_every_method_on_two_gpus_matches_one_process():
    _check(2)
