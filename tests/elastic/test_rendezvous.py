"""Which attempt a worker is in, joining without torchrun says how to start it, and the
backend every rank agrees on."""

import json

import pytest
import torch.distributed as dist

from companion.elastic import attempt, join_elastic, rendezvous

pytestmark = pytest.mark.ch8


def test_the_attempt_is_torchruns_restart_count(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert attempt() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert attempt() == 2


def test_without_torchrun_it_says_how_to_start(monkeypatch):
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="start this with torchrun"):
        join_elastic()
    with pytest.raises(ValueError, match="unknown backend|backend must be one of|'mpi'"):
        join_elastic("mpi")


def _decide(monkeypatch, backend, me, others, gpus):
    """Rank 0's choice, with the other ranks' ``[machine, agent's processes, GPUs]`` in the
    store already and this machine having ``gpus`` GPUs (nccl built in)."""
    monkeypatch.setattr(rendezvous, "gpu_count", lambda: gpus)
    monkeypatch.setattr(rendezvous.dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(rendezvous, "_machine", lambda: me[0])
    store = dist.HashStore()
    for r, entry in enumerate(others, start=1):
        store.set(f"machine/{r}", json.dumps(entry))
    return rendezvous._backend_for_machines(store, backend, 0, 1 + len(others), me[1])


def test_auto_takes_nccl_where_each_machine_has_a_gpu_per_process(monkeypatch):
    assert _decide(monkeypatch, "auto", ("a", 2), [["a", 2, 2], ["b", 2, 2], ["b", 2, 2]], 2) == (
        "nccl"
    )
    # one machine short of GPUs: every rank falls back together, whatever its own GPUs
    assert _decide(monkeypatch, "auto", ("a", 1), [["b", 1, 0]], 1) == "gloo"


def test_agents_that_share_a_machine_share_its_gpus(monkeypatch):
    """Chapter 8's two "nodes" on one computer: each agent has 1 process, the GPU is one."""
    assert _decide(monkeypatch, "auto", ("a", 1), [["a", 1, 1]], 1) == "gloo"
    assert _decide(monkeypatch, "gloo", ("a", 1), [["a", 1, 1]], 1) == "gloo"
    with pytest.raises(ValueError, match="several torchrun agents share a machine"):
        _decide(monkeypatch, "nccl", ("a", 1), [["a", 1, 1]], 1)
