"""Which attempt a worker is in, and joining without torchrun says how to start it."""

import pytest

from companion.elastic import attempt, join_elastic

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
