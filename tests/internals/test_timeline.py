"""The recorded timeline of one step: phases in order, one all-reduce per bucket (or one
average_gradients call after backward), overlap accounting, and the picture."""

import matplotlib
import pytest

from companion.core import get_model
from companion.internals import bucket_sizes, overlap, plot_timeline, record_step
from companion.runtime import launch

matplotlib.use("Agg")
pytestmark = pytest.mark.ch6


def test_the_timeline_holds_every_phase_gradient_and_allreduce():
    timelines = {}
    for variant, cap in (("NaiveDDP", 25.0), ("HookedDDP", 25.0), ("BucketedDDP", 0.05)):
        timelines[variant] = launch(
            record_step, 2, variant, "lenet", 8, cap, 1, backend="gloo", timeout=120
        )[0]
    for variant, events in timelines.items():
        labels = [label for label, _, _ in events]
        phases = {
            label: (s, e)
            for label, s, e in events
            if label in ("forward", "backward", "finish", "optimizer")
        }
        starts = [phases[p] for p in ("forward", "backward", "finish", "optimizer")]
        assert all(a[1] <= b[0] for a, b in zip(starts, starts[1:]))  # one after another
        ready = [label for label in labels if label.endswith(" ready")]
        comm = [(s, e) for label, s, e in events if label not in phases and label not in ready]
        assert all(s <= e for _, s, e in events)
        total, hidden = overlap(events)
        assert 0 <= hidden <= total + 1e-12
        if variant == "NaiveDDP":
            assert ready == [] and labels.count("average_gradients") == 1
            assert comm[0][0] >= phases["backward"][1]  # it starts after backward: no overlap
            assert hidden == 0
        else:
            assert len(ready) == 10  # one tick per LeNet parameter tensor
            buckets = len(bucket_sizes(get_model("lenet"), 0.05))
            assert len(comm) == (10 if variant == "HookedDDP" else buckets)
    assert sum(1 for label, _, _ in timelines["BucketedDDP"] if label.startswith("bucket ")) > 1
    fig = plot_timeline(timelines, "test")
    assert len(fig.axes) == 3
