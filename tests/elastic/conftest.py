"""Runs shared by the tests of chapter 8: one uninterrupted torchrun run, the reference."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from companion.elastic import run_agents, standalone_command

# Two epochs of the ci profile, a snapshot every 20 steps: small enough for 2 cores. gloo keeps
# every run on the CPU whatever GPUs there are, so that the runs compare with each other.
ARGS = ["--profile", "ci", "--epochs", "2", "--snapshot-every", "20", "--backend", "gloo"]
TIMEOUT = 120  # seconds per run; a normal run takes a few


def snapshot_args(path: Path) -> list[str]:
    return [*ARGS, "--snapshot", str(path)]


def processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


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
