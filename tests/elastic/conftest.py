"""Runs shared by the tests of chapter 8: one uninterrupted torchrun run, the reference."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from companion.elastic import run_agents, standalone_command
from tests.processes import processes_with

# Two epochs of the ci profile, a snapshot every 20 steps: small enough for 2 cores. gloo keeps
# every run on the CPU whatever GPUs there are, so that the runs compare with each other.
ARGS = ["--profile", "ci", "--epochs", "2", "--snapshot-every", "20", "--backend", "gloo"]
TIMEOUT = 120  # seconds per run; a normal run takes a few


def snapshot_args(path: Path) -> list[str]:
    return [*ARGS, "--snapshot", str(path)]


def assert_no_process_left(marker: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == [], f"processes left behind: {processes_with(marker)}"


def final_model(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> tuple[Path, str]:
    """The uninterrupted run: 2 processes, 2 epochs; its final snapshot and its output."""
    path = tmp_path_factory.mktemp("reference") / "snapshot.pt"
    [run] = run_agents([standalone_command(2, snapshot_args(path))], timeout=TIMEOUT)
    run.check()
    assert_no_process_left(str(path))
    return path, run.stdout
