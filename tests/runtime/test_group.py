"""The one backend rule, the rank's device, threads per worker, and joining a group."""

import pytest
import torch

from companion.runtime import group
from companion.runtime.group import backend_for, init_from_env, rank_device, threads_per_worker

pytestmark = pytest.mark.ch3


def test_backend_is_nccl_only_when_every_process_has_a_gpu(monkeypatch):
    monkeypatch.setattr(group, "gpu_count", lambda: 0)
    assert backend_for(2) == "gloo"
    monkeypatch.setattr(group, "gpu_count", lambda: 1)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert backend_for(1) == "nccl"
    assert backend_for(2) == "gloo"  # two processes on one GPU: nccl refuses them
    monkeypatch.setattr(group, "gpu_count", lambda: 2)
    assert backend_for(2) == "nccl"
    assert backend_for(3) == "gloo"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_backend_for_refuses_a_bad_process_count(bad):
    with pytest.raises(ValueError, match="integer >= 1"):
        backend_for(bad)


def test_rank_device_is_the_local_gpu_under_nccl_and_the_cpu_under_gloo():
    assert rank_device(1, "nccl") == torch.device("cuda", 1)
    assert rank_device(1, "gloo") == torch.device("cpu")


def test_rank_device_outside_a_group_says_where_to_call_it():
    with pytest.raises(RuntimeError, match="inside a worker"):
        rank_device()


def test_threads_per_worker_share_the_cores(monkeypatch):
    monkeypatch.setattr(group.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert [threads_per_worker(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_init_from_env_with_nccl_but_too_few_gpus_says_what_to_do(monkeypatch):
    env = dict(
        RANK="0",
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(group, "gpu_count", lambda: 1)
    with pytest.raises(ValueError, match="one GPU per process.*--backend gloo"):
        init_from_env("nccl")
