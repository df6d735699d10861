"""The same-bits benchmark (chapter 11): its structure and its bytes, not its times."""

import pytest

from companion_tools.bench.samebits import METHODS, measure, report

pytestmark = pytest.mark.ch11


def test_the_benchmark_times_every_method_and_counts_their_bytes():
    seen = measure((1, 2, 4), "ci", rounds=2, steps=1)
    params = 61_706  # LeNet's, 4 bytes each
    for n, run in seen["runs"].items():
        assert set(run["seconds"]) == set(METHODS)
        assert all(len(t) == 2 and min(t) > 0 for t in run["seconds"].values())
        ring = 2 * (n - 1) / n * (params + 10) * 4  # and one used flag per parameter tensor
        assert run["sent"]["pieces (halving)"] == pytest.approx(ring, abs=4 * n)  # uneven halves
    assert seen["runs"][4]["sent"]["pieces (gather)"] == 3 * (params + 10) * 4
    text = report(seen)
    assert text.count("pieces (halving) against DDP:") == 2 and "fp32" in text
    assert text.count("pieces against DDP:") == 1 and text.count("pieces (gather) ") == 4
