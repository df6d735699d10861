"""Oversubscription: the two settings really run with the threads they claim (no timing asserts)."""

import pytest

from companion.core.devices import cpu_cores
from companion.runtime.group import threads_per_worker
from companion.troubleshoot.threads import oversubscription

pytestmark = pytest.mark.ch8


def test_every_core_against_a_share_of_the_cores():
    found = oversubscription(2, size=32, repeats=3)
    assert found["every core"]["threads per worker"] == cpu_cores()
    assert found["every core"]["threads in all"] == 2 * cpu_cores()
    assert (
        found["cores // N"]["threads per worker"]
        == threads_per_worker(2)
        == max(1, cpu_cores() // 2)
    )
    assert all(v["seconds"] > 0 for v in found.values())


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="world_size"):
        oversubscription(0)
    with pytest.raises(ValueError, match="size and repeats"):
        oversubscription(2, size=0)
