"""Chapter 2: the split benchmark measures both sides and the phases (no timing assertions)."""

import pytest

from companion.bench import available
from companion.bench.split import PHASES, measure
from companion.bench.split import main

pytestmark = pytest.mark.ch2


def test_split_benchmark_reports_ratios_and_where_the_time_goes(capsys):
    result = measure("ci", rounds=1, steps=4)
    assert set(result.step) == {"one device", "naive", "foreach"} and result.steps == 4
    assert all(sec > 0 for sec in result.step.values()) and result.copy_replicas > 0
    assert result.ratio("naive") == pytest.approx(result.step["naive"] / result.step["one device"])
    for version in ("naive", "foreach"):
        assert list(result.phases[version]) == list(PHASES)
        assert all(sec > 0 for sec in result.phases[version].values())
    assert "split" in available()
    assert main(["--profile", "ci", "--rounds", "1", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "allreduce_grads" in out and "CPU" in out
