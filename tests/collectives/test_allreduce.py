"""The hand-written all-reduces equal dist.all_reduce, for every world size, size and dtype."""

import functools

import pytest
import torch

from companion.collectives import (
    ALLREDUCES,
    HAND_WRITTEN,
    allreduce_naive,
    allreduce_recursive_doubling,
    allreduce_ring,
    allreduce_ring_pipelined,
    check_allreduce,
    chunk_bounds,
    cost_terms,
)
from companion.runtime import launch

pytestmark = pytest.mark.ch3

# 1 and 7 are the sizes the chapter names; 0, 2 and 3 are smaller than some world sizes
# (empty ring chunks); 1_000_003 is a prime over a million (chunks of unequal length).
NUMELS = (0, 1, 2, 3, 7, 1_000_003)
DTYPES = (torch.float32, torch.float64)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_algorithm_equals_dist_all_reduce(world_size):
    # check_allreduce raises inside the worker on any mismatch (assert_close on random data,
    # exact equality on integer-valued data); a failure surfaces here as a WorkerError.
    per_rank = launch(check_allreduce, world_size, NUMELS, DTYPES, timeout=180)
    assert len(per_rank) == world_size
    for rows in per_rank:
        checked = {(name, numel, dtype) for name, numel, dtype, _ in rows}
        assert checked == {
            (n, k, str(d).replace("torch.", ""))
            for n in HAND_WRITTEN
            for k in NUMELS
            for d in DTYPES
        }
        assert all(diff <= (1e-5 if dtype == "float32" else 1e-12) for _, _, dtype, diff in rows)
    if world_size <= 2:  # one or two summands: every algorithm adds in the same order
        assert all(diff == 0 for rows in per_rank for *_, diff in rows)


def test_recursive_doubling_handles_a_non_power_of_two_world_size_as_documented():
    # Documented fallback: the ranks above the largest power of two fold in and out, two extra steps.
    assert "Any world size works" in allreduce_recursive_doubling.__doc__
    assert cost_terms("recursive doubling", 3) == (3.0, 3.0)
    assert cost_terms("recursive doubling", 4) == (2.0, 2.0)
    rows = launch(check_allreduce, 3, (5, 1000), (torch.float64,))[0]
    assert {name for name, *_ in rows} >= {"recursive doubling"}


@pytest.mark.parametrize("numel, world_size", [(0, 3), (2, 4), (7, 3), (8, 4), (1_000_003, 4)])
def test_chunk_bounds_cover_everything_in_near_equal_pieces(numel, world_size):
    bounds = chunk_bounds(numel, world_size)
    assert len(bounds) == world_size and bounds[0][0] == 0 and bounds[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    "allreduce",
    [allreduce_naive, allreduce_ring, allreduce_ring_pipelined, allreduce_recursive_doubling],
)
def test_non_contiguous_tensors_are_refused(allreduce):
    with pytest.raises(ValueError, match="contiguous"):
        allreduce(torch.zeros(3, 4).t())


def test_the_registry_names_every_algorithm():
    assert HAND_WRITTEN == ["naive", "ring", "pipelined ring", "recursive doubling"]
    assert list(ALLREDUCES) == HAND_WRITTEN + ["dist.all_reduce"]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_pipelined_ring_with_tiny_segments(world_size):
    # Segments of 2 and 3 elements: many segments per chunk, chunks of unequal length, and
    # steps where the chunk sent and the chunk received have different numbers of segments.
    pipelined = {
        f"pipelined ring, segment {k}": functools.partial(allreduce_ring_pipelined, segment=k)
        for k in (2, 3)
    }
    rows = launch(
        check_allreduce,
        world_size,
        (1, 5, 7, 11, 1000),
        (torch.float64,),
        algorithms=pipelined,
        timeout=60,
    )[0]
    assert len(rows) == 2 * 5


@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_ranks_with_different_sizes_are_named_under_torch_s_debug_switch(name, monkeypatch):
    """Ranks posting different sizes abort inside gloo (SIGABRT) and the launcher says how to
    find out; with TORCH_DISTRIBUTED_DEBUG=DETAIL every rank names the mismatch instead."""
    from companion.runtime import WorkerDied, WorkerError

    from .workers import mismatched_allreduce

    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    with pytest.raises(
        WorkerError,
        match=r"RanksDisagree: all-reduce: rank 1 passed a "
        r"torch\.float32 tensor of shape \(6,\) \(6 elements\), rank 0 a "
        r"torch\.float32 tensor of shape \(5,\) \(5 elements\)",
    ):
        launch(mismatched_allreduce, 3, name, backend="gloo", timeout=60)
    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG")
    try:
        launch(mismatched_allreduce, 3, name, backend="gloo", timeout=60)
    except WorkerDied as died:  # gloo's abort: the message says what to rerun with
        assert "SIGABRT" in str(died) and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in str(died)
    except Exception as other:  # a hang until the timeout is also possible: not silent
        assert "timed out" in str(other) or "raised" in str(other), other
    else:
        pytest.fail("a mismatched all-reduce returned on every rank")
