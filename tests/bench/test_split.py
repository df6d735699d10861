"""Chapter 2: the split benchmark measures both sides and the phases (no timing assertions)."""

import pytest

from companion_tools.bench import available
from companion_tools.bench.split import PHASES, main, measure

pytestmark = pytest.mark.ch2


def test_split_benchmark_reports_ratios_and_where_the_time_goes(capsys):
    result = measure("ci", rounds=2, steps=4)
    assert set(result.step) == {"one device", "naive", "foreach"} and result.steps == 4
    assert all(sec > 0 for sec in result.step.values()) and result.copy_replicas > 0
    naive = [a / b for a, b in zip(result.per_round["naive"], result.per_round["one device"])]
    assert result.ratio("naive").rounds == 2 and result.ratio("naive").low == min(naive)
    for version in ("naive", "foreach"):
        assert list(result.phases[version]) == list(PHASES)
        assert all(sec > 0 for sec in result.phases[version].values())
    assert "split" in available()
    assert main(["--profile", "ci", "--rounds", "1", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "allreduce_grads" in out and "CPU" in out
    assert "ci target <= 1.1: noise (" in out  # one round (or a busy machine)
    assert "load average" in out and "before" in out
