"""The tour's workers show what torch.distributed's primitives do, rank by rank."""

import pytest

from companion.collectives import collectives, faulty, point_to_point, ring_trace
from companion.runtime import launch

pytestmark = pytest.mark.ch3


def test_point_to_point_messages_arrive():
    seen = launch(point_to_point, 3)
    assert seen[1]["send/recv"] == "received [10.0, 20.0, 30.0] from rank 0"
    assert seen[2]["send/recv"] == "not involved"
    assert [s["isend/irecv ring shift"] for s in seen] == [
        "sent 0 right, received 2 from the left",
        "sent 1 right, received 0 from the left",
        "sent 2 right, received 1 from the left",
    ]
    assert launch(point_to_point, 1) == [{"send/recv": "needs 2 ranks"}]


def test_each_collective_leaves_what_the_chapter_says():
    seen = launch(collectives, 3)
    starts = [[0.0, 1.0, 2.0], [10.0, 11.0, 12.0], [20.0, 21.0, 22.0]]
    sums = [30.0, 33.0, 36.0]
    assert [s["start"] for s in seen] == starts
    assert all(s["broadcast from 0"] == starts[0] for s in seen)
    assert seen[0]["reduce to 0"] == sums and seen[1]["reduce to 0"] == "(scratch)"
    assert all(s["all_reduce"] == sums and s["all_gather"] == starts for s in seen)
    assert [s["reduce_scatter"] for s in seen] == [[30.0], [33.0], [36.0]]


def test_faulty_refuses_an_unknown_failure():
    with pytest.raises(ValueError, match="unknown failure 'explode'"):
        faulty(0, 1, "explode")


def test_ring_trace_shows_reduce_scatter_then_all_gather():
    traces = launch(ring_trace, 3)
    assert [t[0] for t in traces] == [[1, 2, 3], [10, 20, 30], [100, 200, 300]]
    assert all(
        len(t) == 1 + 2 * 2 for t in traces
    )  # start, 2 reduce-scatter and 2 all-gather steps
    # after reduce-scatter rank r owns the complete sum of chunk r + 1
    assert [traces[r][2][(r + 1) % 3] for r in range(3)] == [222, 333, 111]
    assert all(t[-1] == [111, 222, 333] for t in traces)
