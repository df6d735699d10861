"""Chapter 2's picture: trace_step is train_batch itself, and records the real split and sum."""

import matplotlib
import pytest
import torch

from companion.core import lenet, set_seed
from companion.split import copy_replicas, train_batch
from companion_tools.pictures import MAX_WIDTH, plot_step, trace_step

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch2


def batch(device, n=10):
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, 1, 28, 28, generator=g).to(device), torch.arange(n).to(device) % 10


@pytest.mark.parametrize("k", [1, 3])
def test_recording_changes_nothing_and_sees_the_split_and_the_sum(device, k, deterministic):
    devices = [device] * k
    X, y = batch(device)
    set_seed(0)
    net = lenet().to(device)
    plain, recorded = copy_replicas(net, devices), copy_replicas(net, devices)
    loss = train_batch(X, y, plain, devices, lr=0.1)
    step = trace_step(X, y, recorded, devices, lr=0.1)
    for a, b in zip(plain, recorded):  # the same step, bit for bit
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert step.loss == float(loss)
    sizes = [b - a for a, b in step.rows]
    assert sizes == ([4, 3, 3] if k == 3 else [10]) and step.rows[0][0] == 0
    assert sum(step.labels, []) == y.tolist() and step.devices == [str(X.device)] * k
    assert step.param == [n for n, _ in net.named_parameters()][-1]
    summed = torch.tensor(step.before).sum(dim=0)
    for after in step.after:
        torch.testing.assert_close(torch.tensor(after), summed)
    if k > 1:  # the shards' gradients differ before the sum
        assert step.before[0] != step.before[1]


def test_an_unknown_parameter_is_refused():
    net = lenet()
    X, y = batch("cpu")
    with pytest.raises(ValueError, match="has no parameter 'bias'"):
        trace_step(X, y, copy_replicas(net, ["cpu"]), ["cpu"], 0.1, param="bias")


def test_the_figure_fits_the_page():
    devices = ["cpu"] * 3
    X, y = batch("cpu")
    step = trace_step(X, y, copy_replicas(lenet(), devices), devices, 0.1)
    fig = plot_step(step)
    assert fig.get_size_inches()[0] <= MAX_WIDTH
    heat = fig.axes[1]
    labels = [t.get_text() for t in heat.get_yticklabels()]
    assert labels[3] == "sum" and len(labels) == 7 and heat.get_xlabel()
    plt.close(fig)
