"""The chapter 3 benchmarks run and measure what they claim (no timing assertions)."""

import subprocess
import sys

import pytest

from companion_tools.bench import available
from companion_tools.bench.allreduce import ALGORITHMS, measure, ratios
from companion_tools.bench.launch import measure as measure_startup

pytestmark = pytest.mark.ch3


def test_allreduce_benchmark_measures_every_algorithm_at_every_size():
    found = measure(2, megabytes=(0.25, 0.5), repeats=1)
    assert sorted(found) == [2**18, 2**19]
    for row in found.values():
        assert set(row) == set(ALGORITHMS) and all(m.busbw > 0 for m in row.values())
        found_ratios = ratios(row)
        assert set(found_ratios) == {
            "ring / dist.all_reduce",
            "pipelined ring / dist.all_reduce",
            "naive / ring",
        }
        # one round: the paired ratio of bandwidths is the inverse ratio of the times
        assert found_ratios["naive / ring"].median == pytest.approx(
            row["naive"].busbw / row["ring"].busbw
        )
        assert all(len(m.rounds) == 1 for m in row.values())
    with pytest.raises(ValueError, match="at least 2 processes"):
        measure(1)


def test_launch_benchmark_times_both_start_methods():
    secs = measure_startup(1, repeats=1)
    assert set(secs) == {"forkserver", "spawn"} and all(min(s) > 0 for s in secs.values())
    with pytest.raises(ValueError, match="repeats"):
        measure_startup(1, repeats=0)


def test_cli_lists_the_chapter_3_benchmarks():
    assert {"allreduce", "launch"} <= set(available())
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "companion_tools.bench",
            "allreduce",
            "--mb",
            "0.25",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "pipelined ring / dist.all_reduce" in out.stdout and "0.25 MB  ring " in out.stdout
    # one round, or a busy machine: noise either way, whatever the load of the machine
    assert (
        "target >= 0.95\n" in out.stdout
        and "noise (" in out.stdout
        and "load average" in out.stdout
    )
