"""The chapter 10 benchmark runs every method and reports bytes and times (no timing
assertions: the bytes are facts of the method, the times of the machine)."""

import pytest

from companion.slowlinks import METHODS
from companion_tools.bench import available
from companion_tools.bench.compression import measure, report

pytestmark = pytest.mark.ch10


def test_compression_benchmark_measures_every_method_against_ddp():
    assert "compression" in available()
    seen = measure(2, "ci", rounds=2, steps=2)
    assert list(seen["seconds"]) == list(METHODS)
    assert all(len(s) == 2 and min(s) > 0 for s in seen["seconds"].values())
    sent = seen["bytes"]
    assert sent["fp16"] == sent["bf16"] == sent["DDP"] / 2  # half the bytes, every step
    assert 0 < sent["PowerSGD r1"] < sent["PowerSGD r4"] < sent["DDP"] / 4
    # 2 rounds of 2 steps after 3 warm-up steps: steps 4-7, one meeting (step 4) every 4
    assert sent["local SGD H4"] == sent["DDP"] / 4
    assert sent["DiLoCo H16"] == 0  # no meeting among steps 4-7
    text = report(seen)
    assert "2 processes, model lenet" in text and "profile 'ci'" in text and "CPU" in text
    assert "time vs DDP" in text and "(rounds " in text and "fp32" in text
    assert "meetings within these 4 timed steps" in text
