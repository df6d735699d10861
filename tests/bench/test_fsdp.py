"""Chapter 9's benchmark of where FSDP2's step goes: it times each phase of both methods,
sums FSDP2's own regions from the profiler, and writes nothing to stderr (no timing
assertions)."""

import subprocess
import sys

import pytest

from companion_tools.bench import available
from companion_tools.bench.fsdp import METHODS, PHASES, measure, report

pytestmark = pytest.mark.ch9


def test_fsdp_benchmark_times_each_phase_and_splits_fsdp2_s_regions():
    assert "fsdp" in available()
    seen = measure(2, "ci", rounds=2, steps=2)
    assert list(seen["phases"]) == list(METHODS)
    for phases in seen["phases"].values():
        assert list(phases) == list(PHASES)
        assert all(len(r) == 2 and min(r) > 0 for r in phases.values())  # per round
    regions = seen["regions"]  # found by name in the profile, each region's own time
    assert regions["all_gather"] > 0 and regions["post_backward_reduce"] > 0
    assert not any(name.startswith("FSDP::") or " (" in name for name in regions)
    text = report(seen)
    assert "FSDP2's own regions on rank 0" in text and "DTensor shards" in text
    assert "profile ci" in text and "fp32" in text and "CPU" in text


def test_the_profiler_leaves_the_command_s_stderr_empty():
    """torch's profiler writes notes about CUDA devices from C++ on a CUDA build without a
    GPU; a notebook would show them as warnings."""
    done = subprocess.run(
        [sys.executable, "-m", "companion_tools.bench", "fsdp", "--rounds", "1", "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert "all_gather" in done.stdout
