"""Chapter 3: the all-reduces' opt-in traces record what really happened, and cost nothing off."""

import math

import pytest
import torch

from companion.collectives import TRACED, chunk_bounds, link_load, trace_allreduce
from companion.runtime import launch
from tests.collectives.workers import traced_equals_untraced

pytestmark = pytest.mark.ch3


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_recording_is_off_by_default_and_changes_no_result(world_size):
    rows = launch(traced_equals_untraced, world_size, timeout=120)
    assert len(rows[0]) == len(TRACED) * 4
    for per_rank in rows:
        for name, numel, identical, n_steps, default_none in per_rank:
            assert identical, f"{name}, {numel} elements: the trace changed the result"
            assert default_none and n_steps >= 1


@pytest.fixture(scope="module")
def traces():
    """Every traced algorithm's steps on 2, 3 and 4 ranks (one launch each)."""
    return {(name, p): launch(trace_allreduce, p, name) for name in TRACED for p in (2, 3, 4)}


@pytest.mark.parametrize("name", TRACED)
@pytest.mark.parametrize("p", [2, 3, 4])
def test_the_final_state_is_the_all_reduce_result(traces, name, p):
    per_rank = traces[name, p]
    total = sum(torch.tensor(steps[0].after) for steps in per_rank)
    assert [steps[0].after for steps in per_rank] == [
        tuple(float((i + 1) * 10**r) for i in range(p)) for r in range(p)
    ]
    assert all(torch.equal(torch.tensor(steps[-1].after), total) for steps in per_rank)


@pytest.mark.parametrize("name", TRACED)
@pytest.mark.parametrize("p", [2, 3, 4])
def test_every_message_has_two_ends_with_the_same_step(traces, name, p):
    steps = [s for per_rank in traces[name, p] for s in per_rank[1:]]
    sends = {(s.step, s.rank, s.sent_to, s.sent) for s in steps if s.sent_to is not None}
    receives = {
        (s.step, s.received_from, s.rank, s.received) for s in steps if s.received_from is not None
    }
    assert sends == receives and sends


@pytest.mark.parametrize("p", [2, 3, 4])
def test_the_ring_sends_every_chunk_over_each_link_as_expected(traces, p):
    bounds = chunk_bounds(p, p)
    crossings = {}
    for per_rank in traces["ring", p]:
        assert [s.step for s in per_rank[1:]] == list(range(2 * (p - 1)))
        for s in per_rank[1:]:
            assert s.sent_to == (s.rank + 1) % p and s.received_from == (s.rank - 1) % p
            key = (bounds.index(s.sent), s.rank)
            crossings[key] = crossings.get(key, 0) + 1
    for chunk in range(p):
        for rank in range(p):
            # reduce-scatter: every rank but chunk - 1 passes it on; all-gather: all but chunk - 2
            want = 2 - (rank == (chunk - 1) % p) - (rank == (chunk - 2) % p)
            assert crossings.get((chunk, rank), 0) == want, (chunk, rank)
    load = link_load(s for per_rank in traces["ring", p] for s in per_rank)
    assert load == {(r, (r + 1) % p): 2 * (p - 1) for r in range(p)}  # one element per chunk


@pytest.mark.parametrize("p", [2, 3, 4])
def test_naive_goes_through_rank_0_and_doubling_swaps_whole_tensors(traces, p):
    naive = link_load(s for per_rank in traces["naive", p] for s in per_rank)
    assert naive == dict(
        sorted({**{(r, 0): p for r in range(1, p)}, **{(0, r): p for r in range(1, p)}}.items())
    )
    doubling = traces["recursive doubling", p]
    if p & (p - 1) == 0:  # a power of two: log2 p swaps with rank ^ 2**k
        for rank, per_rank in enumerate(doubling):
            assert [s.sent_to for s in per_rank[1:]] == [
                rank ^ (1 << k) for k in range(int(math.log2(p)))
            ]
    else:  # fold in, swaps, fold out
        assert [s.phase for s in doubling[p - 1][1:]] == ["fold in", "fold out"]


def test_trace_allreduce_refuses_an_algorithm_without_a_trace():
    with pytest.raises(ValueError, match="cannot trace 'pipelined ring'"):
        trace_allreduce(0, 1, "pipelined ring")
