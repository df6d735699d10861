"""Ranks with different numbers of batches under chapter 6's wrappers: chapter 5's
``train_uneven`` around torch's DDP and each wrapper equals one process on the samples seen
(the drop-in table's row for it)."""

from functools import partial

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from companion.core.models import get_model
from companion.ddp import expected_params, join_worker, uneven_shares
from companion.internals import BucketedDDP, HookedDDP, NaiveDDP
from companion.runtime import launch

pytestmark = pytest.mark.ch6


@pytest.mark.parametrize("counts", [[3, 1], [1, 3, 0, 2]])
def test_train_uneven_joins_each_wrapper_of_the_chapter(counts):
    """Chapter 5's train_uneven around torch's DDP and each of chapter 6's wrappers: the
    drop-in table's row for ranks with different numbers of batches."""
    shares, lenet = uneven_shares(counts), partial(get_model, "lenet")
    expected = expected_params(shares, lenet, "by the loop", "SGD momentum")
    for wrapper in (DDP, NaiveDDP, HookedDDP, BucketedDDP):
        runs = launch(join_worker, len(counts), shares, lenet, "by the loop", "SGD momentum",
                      wrapper=wrapper, backend="gloo", timeout=120)  # fmt: skip
        assert all(r["steps"] == max(counts) for r in runs)
        assert all(torch.allclose(r["params"], expected, rtol=1e-9, atol=1e-12) for r in runs)
