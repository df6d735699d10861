"""Chapter 4's picture: record_forward computes DataParallelByHand's output and records its steps."""

import matplotlib
import pytest
import torch
from torch.nn import functional as F

from companion.core import lenet, set_seed
from companion.dataparallel import DataParallelByHand
from companion_tools.pictures import (
    MAX_WIDTH,
    plot_backward,
    plot_forward,
    record_backward,
    record_forward,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch4


def test_the_record_matches_the_real_forward_and_backward(device):
    set_seed(0)
    net, devices = lenet().to(device), [device] * 3
    X = torch.rand(10, 1, 28, 28, device=device)
    y_hat, trace = record_forward(net, X, devices)
    reference = DataParallelByHand(net, devices)(X)
    assert torch.equal(y_hat, reference)
    y_hat.sum().backward()
    recorded = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    reference.sum().backward()
    for a, p in zip(recorded, net.parameters()):  # the replicas' sums may add in another order
        torch.testing.assert_close(a, p.grad)
    where = str(X.device)
    assert trace.input == ((10, 1, 28, 28), where)
    assert trace.chunks == [((4, 1, 28, 28), where)] * 2 + [((2, 1, 28, 28), where)]
    assert trace.replicas == [(where, True), (where, False), (where, False)]
    assert trace.outputs == [((4, 10), where)] * 2 + [((2, 10), where)]
    assert trace.output == ((10, 10), where)
    assert [name for name, _, _ in trace.steps] == [
        "scatter",
        "replicate",
        "parallel_apply",
        "gather",
    ]
    _, begin, end = trace.steps[2]
    for i, (name, start, stop) in enumerate(trace.threads):
        assert name == f"replica {i} on {devices[i]}" and begin <= start <= stop <= end


def test_one_chunk_is_refused():
    with pytest.raises(ValueError, match="makes one chunk"):
        record_forward(lenet(), torch.rand(1, 1, 28, 28), ["cpu", "cpu"])


def test_the_figure_fits_the_page():
    _, trace = record_forward(lenet(), torch.rand(6, 1, 28, 28), ["cpu"] * 2)
    fig = plot_forward(trace)
    flow, clock = fig.axes
    assert fig.get_size_inches()[0] <= MAX_WIDTH and clock.get_xlabel()
    assert [t.get_text() for t in flow.get_xticklabels()][1] == "1. scatter"
    assert [t.get_text() for t in clock.get_yticklabels()][1:] == [n for n, _, _ in trace.threads]
    plt.close(fig)


def test_the_backward_record_follows_each_replica_into_the_one_grad(device):
    """Chapter 4's backward picture: each replica's gradient on its device, and net's .grad,
    the same as a real DataParallelByHand step leaves, equal to their sum; the replicas'
    gradients differ (their chunks do), so the sum could not be any one of them."""
    devices = [device] * 3
    X, y = torch.rand(10, 1, 28, 28, device=device), torch.arange(10, device=device) % 10
    set_seed(0)
    net = lenet().to(device)
    trace = record_backward(net, X, y, devices, param="3.weight")
    set_seed(0)
    reference = lenet().to(device)
    F.cross_entropy(DataParallelByHand(reference, devices)(X), y).backward()
    torch.testing.assert_close(net.get_parameter("3.weight").grad, reference[3].weight.grad)
    assert trace.parameter == "3.weight"
    assert [where for where, _ in trace.replicas] == [str(device)] * 3
    assert trace.grad[0] == str(device) and trace.summed < 1e-6
    norms = [norm for _, norm in trace.replicas]
    assert len(set(norms)) == 3 and all(abs(n - trace.grad[1]) > 1e-4 for n in norms)
    fig = plot_backward(trace)
    assert fig.get_size_inches()[0] <= MAX_WIDTH
    plt.close(fig)


def test_the_backward_record_names_a_parameter_the_model_has():
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        record_backward(
            lenet(), torch.rand(4, 1, 28, 28), torch.zeros(4).long(), ["cpu"] * 2, "nope"
        )
