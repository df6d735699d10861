"""Ranks with different numbers of batches (chapter 5): the join by hand equals one process
on the samples really seen, torch's Join equals its formula under both settings, and a loop
with no join is a hang that the launcher's timeout ends with its message."""

from functools import partial

import pytest
import torch

from companion.ddp import expected_params, join_worker, uneven_shares
from companion.internals import TiedFrozenUnused
from companion.runtime import LaunchTimeout, launch

pytestmark = pytest.mark.ch5

ACTIVE = "torch Join, divide by active ranks"


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "counts, optimizer",
    [
        ([3, 1], "Adam"),
        ([3, 1], "SGD momentum"),
        ([2, 4, 1], "SGD momentum"),
        ([1, 3, 0, 2], "Adam"),
    ],
)
def test_join_by_hand_equals_one_process_on_the_samples_seen(counts, optimizer):
    shares = uneven_shares(counts)  # rank r: counts[r] batches of 3 + r samples
    runs = launch(
        join_worker, len(counts), shares, TiedFrozenUnused, "by hand", optimizer,
        backend="gloo", timeout=120,
    )  # fmt: skip
    expected = expected_params(shares, TiedFrozenUnused, "by hand", optimizer)
    assert all(r["steps"] == max(counts) for r in runs)
    assert all(_close(r["params"], expected) for r in runs)  # tied, frozen and unused
    by_rank_count = expected_params(shares, TiedFrozenUnused, ACTIVE, optimizer)
    assert not _close(expected, by_rank_count)  # weighing by samples is what makes it equal


@pytest.mark.parametrize("counts", [[2, 4, 1], [1, 3, 0, 2]])
def test_torch_join_divides_by_a_rank_count_under_both_settings(counts):
    shares = uneven_shares(counts)
    make = partial(TiedFrozenUnused, unused=False)  # torch's DDP needs every parameter used
    got = {}
    for how in ("torch Join", ACTIVE):
        runs = launch(join_worker, len(counts), shares, make, how, backend="gloo", timeout=120)
        got[how] = expected = expected_params(shares, make, how)
        assert [r["steps"] for r in runs] == counts  # each rank's own batches
        assert all(_close(r["params"], expected) for r in runs)  # the last joiner's, broadcast
    assert not _close(*got.values())
    assert not _close(got["torch Join"], expected_params(shares, make, "by hand"))


def test_no_join_is_a_hang_that_the_timeout_ends():
    shares = uneven_shares([2, 1])
    with pytest.raises(LaunchTimeout, match=r"launch timed out after 8 s: .* A hang"):
        launch(
            join_worker, 2, shares, partial(TiedFrozenUnused, unused=False), "no join",
            backend="gloo", timeout=8,
        )  # fmt: skip


@pytest.mark.parametrize(
    "method", ["torch DDP", "BucketedDDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2"]
)
def test_the_joining_loop_makes_every_method_equal_one_process(method):
    """train_uneven around chapter 6's wrappers and chapter 9's stages (tied, frozen and
    unused parameters; a rank with no batch at all)."""
    from .join_workers import uneven_worker

    for counts in ([3, 1], [1, 3, 0, 2]):
        shares = uneven_shares(counts)
        for optimizer in ("Adam", "SGD momentum"):
            runs = launch(
                uneven_worker, len(counts), shares, method, optimizer, backend="gloo", timeout=120
            )
            expected = expected_params(shares, TiedFrozenUnused, "by hand", optimizer)
            assert all(_close(r, expected) for r in runs), (counts, optimizer)
