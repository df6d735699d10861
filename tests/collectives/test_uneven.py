"""Uneven local batches: weighed by sample counts, every all-reduce gives the global-batch
gradient; averaged by the world size (dist_tuto's recipe), none does."""

import pytest
import torch

from companion.collectives import ALLREDUCES, global_gradient, uneven_batch, uneven_gradients
from companion.runtime import WorkerError, launch

pytestmark = pytest.mark.ch3

NAIVE_ERROR = 1e-3  # the world-size average misses the global gradient by more than this
SIZES = [(5, 1), (4, 3, 3), (7, 2, 5, 1)]  # world sizes 2, 3, 4; no two splits alike


@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_weighed_average_is_the_global_batch_gradient_and_the_plain_mean_is_not(sizes):
    grads = launch(uneven_gradients, len(sizes), sizes, timeout=120, backend="gloo")
    expected = global_gradient(sizes)
    for rank, by_method in enumerate(grads):
        assert set(by_method) == {(name, w) for name in ALLREDUCES for w in (False, True)}
        for (allreduce, weighed), grad in by_method.items():
            if weighed:
                torch.testing.assert_close(
                    grad, expected, msg=lambda m: f"{allreduce}, rank {rank}: {m}"
                )
            else:
                assert (grad - expected).abs().max() > NAIVE_ERROR, allreduce
            assert torch.equal(grad, grads[0][allreduce, weighed])  # every rank holds the same bits


def test_equal_batches_make_both_averages_agree():
    sizes = (3, 3)
    grads = launch(uneven_gradients, 2, sizes, timeout=120, backend="gloo")[0]
    expected = global_gradient(sizes)
    for grad in grads.values():
        torch.testing.assert_close(grad, expected)


def test_the_global_batch_is_seeded_and_sizes_are_checked():
    X, y = uneven_batch((2, 3), seed=1)
    assert X.shape == (5, 1, 28, 28) and torch.equal(y, uneven_batch((2, 3), seed=1)[1])
    with pytest.raises(ValueError, match=r"sizes\[1\] must be a positive integer, got 0"):
        uneven_batch((2, 0))
    with pytest.raises(WorkerError, match="one size per rank"):
        launch(uneven_gradients, 2, (1, 2, 3), timeout=60, backend="gloo")
