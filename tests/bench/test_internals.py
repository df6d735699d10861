"""The chapter 6 benchmark runs and reports what it measured (no timing assertions)."""

import pytest

from companion_tools.bench import available
from companion_tools.bench.internals import METHODS, measure, report

pytestmark = pytest.mark.ch6


def test_internals_benchmark_times_every_variant_and_the_sweep():
    assert "internals" in available()
    seen = measure(2, "ci", rounds=1, steps=1, sweep_model="lenet", caps=(0.01, 1.0))
    assert list(seen["variants"]) == list(METHODS)
    assert all(len(v) == 5 and v[-1] > 0 for v in seen["variants"].values())
    assert (
        seen["allreduces"]["HookedDDP"] == seen["allreduces"]["NaiveDDP"] == 10
    )  # LeNet's tensors
    assert seen["allreduces"]["BucketedDDP"] == seen["allreduces"]["torch DDP"] == 1
    assert len(seen["buckets"][0.01]) > 1 and len(seen["buckets"][1.0]) == 1
    assert seen["alpha"] >= 0 and seen["beta"] >= 0 and set(seen["predicted"]) == {0.01, 1.0}
    text = report(seen)
    assert "vs torch DDP" in text and "1.00x" in text and "target <= 1\n" in text
    assert seen["ratio"].rounds == 1 and "noise (one round, no spread)" in text
    assert "where the time goes" in text and "best cap: model" in text and "CPU" in text
