"""Chapter 4: the dataparallel benchmark times both sides per batch size (no timing assertions)."""

import pytest
import torch

from companion import hardware_label
from companion_tools.bench import available
from companion_tools.bench.dataparallel import main, measure

pytestmark = pytest.mark.ch4

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_dataparallel_benchmark_prints_ratios_per_batch_size(capsys):
    rows = measure("ci", batch_sizes=(8, 64), steps=2, rounds=1)
    assert [r.batch_size for r in rows] == [8, 64]
    for row in rows:
        assert list(row.seconds) == ["1 device", "by hand (2)"] + (
            ["nn.DataParallel (2)"] if GPUS >= 2 else []
        )
        assert all(s > 0 for s in row.seconds.values())
        assert row.ratio("by hand (2)").median == pytest.approx(  # one round
            row.seconds["by hand (2)"] / row.seconds["1 device"]
        )
    assert "dataparallel" in available()
    assert main(["--profile", "ci", "--batch-sizes", "8", "--steps", "2", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "ratio by hand (2)" in out and hardware_label() in out and "profile 'ci'" in out
    assert "batch     8, by hand (2): " in out and "noise (" in out  # one round, or busy
