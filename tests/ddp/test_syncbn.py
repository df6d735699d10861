"""SyncBatchNorm: refused on CPU tensors (what torch says), global statistics on 2+ GPUs."""

import pytest
import torch
from torch import nn

from companion.ddp import batchnorm_statistics
from companion.runtime import launch

pytestmark = pytest.mark.ch5


def test_on_cpu_processes_torch_refuses_syncbatchnorm_and_plain_batchnorm_runs():
    X = torch.rand(8, 1, 6, 6)
    synced = launch(batchnorm_statistics, 2, X, True, backend="gloo", timeout=120)
    assert all("SyncBatchNorm layers only work with GPU modules" in r["error"] for r in synced)
    plain = launch(batchnorm_statistics, 2, X, False, backend="gloo", timeout=120)
    # per-rank statistics: each rank's running mean comes from its own half of X
    assert not torch.allclose(plain[0]["running_mean"], plain[1]["running_mean"])


@pytest.mark.multigpu
def test_on_gpus_every_rank_gets_the_statistics_of_the_global_batch():
    X = torch.rand(8, 1, 6, 6)
    synced = launch(batchnorm_statistics, 2, X, True, timeout=300)
    torch.manual_seed(0)
    whole = nn.Sequential(nn.Conv2d(1, 4, kernel_size=3), nn.BatchNorm2d(4))
    whole(X)
    for r in synced:
        torch.testing.assert_close(r["running_mean"], whole[1].running_mean, rtol=1e-4, atol=1e-5)
