"""The chapter 9 benchmark runs and reports what it measured (no timing assertions)."""

import pytest

from companion.sharding import METHODS
from companion_tools.bench import available
from companion_tools.bench.sharding import measure, report

pytestmark = pytest.mark.ch9


def test_sharding_benchmark_times_zero3_and_fsdp2_and_measures_every_method():
    assert "sharding" in available()
    seen = measure(2, "ci", rounds=2, steps=1)
    assert set(seen["seconds"]) == {"ZeRO-3", "ZeRO-3 prefetch", "FSDP2"}
    assert all(len(r) == 2 and min(r) > 0 for r in seen["seconds"].values())  # per round
    assert list(seen["state"]) == list(METHODS)
    assert all(r["peak"] >= r["state"]["total"] > 0 for r in seen["state"].values())
    text = report(seen)
    assert "ZeRO-3 step / FSDP2 step, 2 processes\n" in text and "(rounds " in text
    assert "target <= 1.25\n" in text and "CPU" in text
    assert "profile ci" in text and "fp32" in text and "ZeRO-3 measured state vs formula" in text
