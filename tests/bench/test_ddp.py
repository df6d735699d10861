"""The chapter 5 benchmark runs and measures what it claims (no timing assertions)."""

import subprocess
import sys

import pytest

from companion.bench import available
from companion.bench.ddp import METHODS, measure, overhead_curve, report

pytestmark = pytest.mark.ch5


def test_ddp_benchmark_times_every_method_and_reports_ddps_buckets():
    seen = measure(2, "ci", rounds=2, steps=1)
    assert list(seen["median"]) == list(METHODS) and all(s > 0 for s in seen["median"].values())
    assert all(len(times) == 2 for times in seen["seconds"].values())
    assert sum(seen["bucket_bytes"]) == 4 * seen["parameters"]  # every float32 gradient, in buckets
    assert seen["tensors"] == 10 and seen["model"] == "lenet" and seen["global_batch"] == 64
    text = report(seen)
    assert "average_gradients (ring)" in text and "vs DDP" in text and "1.00x" in text
    assert "buckets" in text and "overlap" in text and "C++" in text  # the explanation
    assert "DDP step / no-communication step, 2 processes" in text and "target <= 1.1\n" in text
    with pytest.raises(ValueError, match="rounds and steps"):
        measure(2, "ci", rounds=0)


def test_cli_runs_the_ddp_benchmark():
    assert "ddp" in available()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "companion.bench",
            "ddp",
            "--profile",
            "ci",
            "--rounds",
            "1",
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert (
        "DDP vs average_gradients: 2 processes" in out.stdout and "Why DDP is faster" in out.stdout
    )


def test_the_overhead_curve_pairs_ddp_with_the_step_without_communication_per_batch():
    curve = overhead_curve(2, "lenet", batches=(4, 16), rounds=2, steps=1)
    assert [row["global batch"] for row in curve] == [8, 32]
    for row in curve:
        assert row["step"] > 0 and row["ratio"].rounds == 2 and row["ratio"].low > 0
    with pytest.raises(ValueError, match="two processes or more"):
        overhead_curve(1)
    with pytest.raises(ValueError, match="batch must be an integer >= 1, got 0"):
        overhead_curve(2, batches=(0,))
