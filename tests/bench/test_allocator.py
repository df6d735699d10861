"""Chapter 1: the allocator benchmark runs each side in fresh processes and pairs them by round
(no timing assertions: tests/core/test_allocator.py checks the page faults themselves)."""

import pytest

from companion_tools.bench.allocator import SIDES, in_fresh_process, measure, report

pytestmark = pytest.mark.ch1


def test_each_round_runs_both_sides_in_fresh_processes():
    seen = measure("ci", rounds=2, steps=3)
    assert seen["settings"]["model"] == "lenet" and seen["settings"]["global_batch"] == 64
    for side in SIDES:
        runs = seen["rounds"][side]
        assert len(runs) == 2 and all(run["ms"] > 0 and run["faults"] >= 0 for run in runs)
    text = report(seen)
    assert "glibc defaults" in text and "freed memory kept" in text
    assert "kept / defaults, step time:" in text and "(rounds " in text and "against 1: " in text


def test_a_failing_timed_process_says_so():
    with pytest.raises(RuntimeError, match="(?s)the timed process failed:.*unknown model 'vgg'"):
        in_fresh_process(True, "vgg", 4, 1)
