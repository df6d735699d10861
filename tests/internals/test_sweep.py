"""The bucket-size model: bucket sizes of a real model, the predicted step, the best cap."""

import pytest
import torch

from companion.collectives import predict
from companion.internals import best_bucket_cap, bucket_sizes, get_bench_model, mlp, plot_sweep

pytestmark = pytest.mark.ch6

ALPHA, BETA = 1e-4, 1e-9  # 100 us per message, 1 GB/s


def test_mlp_and_its_buckets():
    net = mlp(width=32, depth=3)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    total = sum(p.numel() * 4 for p in net.parameters())
    for cap in (0.001, 0.01, 1.0):
        assert sum(bucket_sizes(net, cap)) == total
    assert len(bucket_sizes(net, 1.0)) == 1 and len(bucket_sizes(net, 0.001)) > 2
    assert len(bucket_sizes(get_bench_model("mlp"), 100.0)) == 1


def test_the_prediction_plays_the_step_out():
    from companion.internals import predict_step

    cost = lambda n: predict("dist.all_reduce", 2, n, ALPHA, BETA)  # noqa: E731
    assert predict_step([1000], 0.01, 0.0, 0.0, 2) == 0.01  # free communication: backward alone
    # one bucket: ready when backward ends, then its all-reduce
    assert predict_step([10**6], 0.01, ALPHA, BETA, 2) == pytest.approx(0.01 + cost(10**6))
    # two halves: the first overlaps the second half of backward
    two = predict_step([5 * 10**5] * 2, 0.01, ALPHA, BETA, 2)
    assert two == pytest.approx(max(0.01, 0.005 + cost(5 * 10**5)) + cost(5 * 10**5))
    assert two < predict_step([10**6], 0.01, ALPHA, BETA, 2)
    # a thousand tiny buckets pay alpha a thousand times
    assert predict_step([1000] * 1000, 0.01, ALPHA, BETA, 2) > two


def test_the_best_cap_is_the_smallest_prediction():
    net = mlp(width=256, depth=8)
    best, predicted = best_bucket_cap(net, [0.01, 0.3, 1.0, 100.0], 0.02, ALPHA, BETA, 2)
    assert predicted[best] == min(predicted.values()) and set(predicted) == {0.01, 0.3, 1.0, 100.0}
    fig = plot_sweep(
        list(predicted), {"BucketedDDP": list(predicted.values())}, list(predicted.values())
    )
    assert fig.axes[0].get_xscale() == "log"
