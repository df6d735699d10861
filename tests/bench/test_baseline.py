"""Chapter 1: the baseline benchmark times both loops in one run (no timing assertions)."""

import subprocess
import sys

import pytest

from companion import hardware_label
from companion_tools.bench.baseline import measure, report

pytestmark = pytest.mark.ch1


def test_measure_times_both_loops_and_labels_the_numbers():
    seen = measure("ci", rounds=1, limit=256, workers=0)
    assert set(seen["median"]) == {"d2l's loop", "companion"}
    assert all(s > 0 for s in seen["median"].values())
    assert seen["ratio"] == pytest.approx(
        seen["median"]["companion"] / seen["median"]["d2l's loop"]
    )
    assert seen["math"] == ("fp32" if not seen["gpu"] else seen["math"]) and seen["samples"] == 256
    text = report(seen)
    assert hardware_label() in text and "profile 'ci'" in text and "ratio" in text


def test_command_line_runs_and_refuses_bad_options():
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "companion_tools.bench",
            "baseline",
            "--profile",
            "ci",
            "--rounds",
            "1",
            "--limit",
            "128",
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0 and "s/epoch" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run(
        [sys.executable, "-m", "companion_tools.bench", "baseline", "--rounds", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--rounds" in bad.stderr
