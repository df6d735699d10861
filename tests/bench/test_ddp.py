"""The chapter 5 benchmark runs and measures what it claims (no timing assertions)."""

import subprocess
import sys

import pytest

from companion_tools.bench import available
from companion_tools.bench.ddp import METHODS, measure, overhead_curve, report, why

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
    assert "one bucket, whose all-reduce starts when backward ends" in text  # LeNet: 1 bucket
    assert "DDP step / no-communication step, 2 processes" in text and "target <= 1.1\n" in text
    with pytest.raises(ValueError, match="rounds and steps"):
        measure(2, "ci", rounds=0)


def test_cli_runs_the_ddp_benchmark():
    assert "ddp" in available()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "companion_tools.bench",
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
    assert "DDP vs average_gradients: 2 processes" in out.stdout and "Why DDP's step" in out.stdout


def test_the_overhead_curve_pairs_ddp_with_the_step_without_communication_per_batch():
    curve = overhead_curve(2, "lenet", batches=(4, 16), rounds=2, steps=1)
    assert [row["global batch"] for row in curve] == [8, 32]
    for row in curve:
        assert row["step"] > 0 and row["ratio"].rounds == 2 and row["ratio"].low > 0
    with pytest.raises(ValueError, match="two processes or more"):
        overhead_curve(1)
    with pytest.raises(ValueError, match="batch must be an integer >= 1, got 0"):
        overhead_curve(2, batches=(0,))


@pytest.mark.parametrize(
    "gloo_rounds, says",
    [
        ((20.0, 21.0, 19.0), "C++ was faster here"),
        ((40.0, 41.0, 39.0), "C++ was slower here"),
        ((30.0, 36.0, 31.0), "C++ was neither faster nor slower here (rounds 0.91-1.09)"),
    ],
)
def test_the_explanation_reads_the_measured_rounds(gloo_rounds, says):
    """It once credited gloo's C++ all-reduce in a run where the Python ring had been faster."""
    rounds = dict(zip(METHODS, ((14.0,) * 3, (32.0, 33.0, 34.0), gloo_rounds, (9.0,) * 3)))
    seen = {
        "seconds": {k: [t / 1e3 for t in v] for k, v in rounds.items()},
        "median": {k: sorted(v)[1] / 1e3 for k, v in rounds.items()},
        "bucket_bytes": [4, 4],
        "tensors": 10,
    }
    text = why(seen)
    flat = " ".join(text.split())  # the phrases, whatever the wrapping
    assert says in flat and f"{sorted(gloo_rounds)[1]:.2f} ms" in text, text
    assert "5.00 ms more" in flat and "(9.00 ms)" in text
    assert "the buckets were faster here" in flat and "2 per step" in flat
    assert "chapter 6 measures how much it hides" in flat
    assert max(len(line) for line in text.splitlines()) <= 90
    assert "\u00a0" not in text
