"""torchrun -m companion.ddp for real: it trains, logs and checkpoints; failures and timeouts
are reported; and no process is left behind, even when torchrun itself is killed."""

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import torch

from companion.core import get_model
from companion.runtime import load_checkpoint, read_scalars, run_torchrun, torchrun_command
from tests.processes import processes_with

pytestmark = pytest.mark.ch5


def wait_gone(marker: str, within: float) -> list[int]:
    deadline = time.monotonic() + within
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_with(marker)


def test_torchrun_trains_with_two_processes_logs_and_checkpoints(tmp_path):
    ckpt, logs = tmp_path / "model.pt", tmp_path / "logs"
    run = run_torchrun(
        2,
        ["--profile", "ci", "--epochs", "2", "--log-dir", logs, "--checkpoint", ckpt],
        timeout=240,
    ).check()
    assert run.command == (
        f"torchrun --standalone --nproc-per-node=2 -m companion.ddp --profile ci --epochs 2 "
        f"--log-dir {logs} --checkpoint {ckpt}"
    )
    lines = run.stdout.splitlines()
    assert lines[0].startswith("data: MNIST offline sample")
    assert lines[1].startswith("      4,000 training and 1,000 test images")
    assert lines[2] == "DDP: 2 processes (gloo), model lenet, global batch 2 x 32, lr 0.1"
    assert [line.split(":")[0] for line in lines[3:5]] == ["epoch 1/2", "epoch 2/2"]
    assert lines[5] == "detectors: replicas identical, shares disjoint, a new order every epoch"
    assert "Warning" not in run.stderr and "warn" not in run.stderr.lower()
    net = load_checkpoint(get_model("lenet"), ckpt)  # a plain model loads rank 0's checkpoint
    assert isinstance(net, torch.nn.Sequential)
    assert [step for step, _ in read_scalars(logs)["test/accuracy"]] == [1, 2]


def test_a_failing_run_reports_its_exit_code_and_error_and_leaves_no_temporary_files(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where torchrun would keep its logs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = run_torchrun(2, ["--profile", "ci", "--global-batch", "63"], timeout=240)
    assert list(tmp_path.iterdir()) == []
    assert run.returncode != 0
    assert "choose a multiple of 2" in run.stderr
    with pytest.raises(RuntimeError, match="exited with code"):
        run.check()


def test_a_timeout_stops_torchrun_and_every_worker():
    marker, most, done = "--seed=424242", [0], threading.Event()

    def count() -> None:  # how many processes carry the marker, at most, during the run
        while not done.is_set():
            most[0] = max(most[0], len(processes_with(marker)))
            time.sleep(0.2)

    watcher = threading.Thread(target=count, daemon=True)
    watcher.start()
    try:
        with pytest.raises(TimeoutError, match="did not finish within 20 s"):
            run_torchrun(2, ["--profile", "ci", "--epochs", "1000", marker], timeout=20)
    finally:
        done.set()
        watcher.join()
    assert most[0] == 3  # torchrun and both workers were running when the timeout struck
    assert wait_gone(marker, within=10) == []


def test_workers_end_when_torchrun_is_killed():
    marker = "--seed=525252"
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_command(2, ["--profile", "ci", "--epochs", "1000", marker])[1:],
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until the workers train
            try:
                if lines.get(timeout=1).startswith("DDP: 2 processes"):
                    break
            except queue.Empty:
                continue
        assert len(processes_with(marker)) == 3  # torchrun and its two workers
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # torchrun dies without stopping its workers
        proc.wait(30)
    assert wait_gone(marker, within=15) == []  # each worker noticed and exited


def test_torchrun_command_and_bad_process_counts():
    assert torchrun_command(4, ["--epochs", 2]) == [
        "torchrun",
        "--standalone",
        "--nproc-per-node=4",
        "-m",
        "companion.ddp",
        "--epochs",
        "2",
    ]
    with pytest.raises(ValueError, match="nproc must be an integer >= 1"):
        torchrun_command(0)
