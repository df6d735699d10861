"""ZeRO-3's timeline: one gather per unit each way and one reduce-scatter per unit, every one
inside the step; prefetch leaves the same collectives and changes only when they start."""

import pytest

from companion.runtime import launch
from companion.sharding.timeline import plot_zero3_timeline, record_zero3_step, waited

pytestmark = pytest.mark.ch9


def test_zero3_step_events_with_and_without_prefetch():
    depth = 3
    runs = {
        p: launch(record_zero3_step, 2, p, 24, depth, 8, 1, backend="gloo", timeout=240)[0]
        for p in (False, True)
    }
    for events in runs.values():
        labels = [label for label, _, _ in events]
        units = depth + 1  # Linear layers of divisible_mlp
        assert sum(label.startswith("gather ") for label in labels) == 2 * units
        assert sum(label.startswith("reduce-scatter ") for label in labels) == units
        assert {"forward", "backward", "optimizer"} <= set(labels)
        end = max(e for label, s, e in events if label == "optimizer")
        assert all(0 <= s <= e <= end for _, s, e in events)
        assert 0 <= waited(events) <= end
    fig = plot_zero3_timeline({f"prefetch={p}": ev for p, ev in runs.items()}, "test")
    assert len(fig.axes) == 2


def test_plot_needs_events():
    with pytest.raises(ValueError, match="give at least one run's events"):
        plot_zero3_timeline({})
