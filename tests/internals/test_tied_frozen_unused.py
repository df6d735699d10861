"""The model that needs care, wrapped in each step: tied once, frozen never, unused named or
handled like find_unused_parameters."""

import pytest
import torch

from companion.internals import TiedFrozenUnused, care_worker
from companion.runtime import launch

pytestmark = pytest.mark.ch6


def test_care_worker_reports_buckets_missing_gradients_and_errors():
    X, y = torch.randn(8, 1, 28, 28), torch.arange(8)
    seen = launch(care_worker, 2, X, y, backend="gloo", timeout=120)[0]
    for variant in ("HookedDDP", "BucketedDDP"):
        assert "parameter(s) unused got no gradient" in seen[variant]["error"]
    handled = seen["BucketedDDP (find_unused_parameters)"]
    names = [n for bucket in handled["buckets"] for n in bucket]
    assert names == [
        "out.bias",
        "out.weight",
        "body.bias",
        "body.weight",
        "embed.bias",
        "embed.weight",
        "unused",
    ]  # reverse order, frozen out, tied once
    assert handled["no gradient"] == ["unused", "frozen.weight", "frozen.bias"]
    assert handled["all-reduces"] == len(handled["buckets"])
    assert TiedFrozenUnused(unused=False)(X).shape == (8, 10)
