"""Chapter 5's pictures: who reads what under DistributedSampler, and the padding."""

import matplotlib
import pytest

from companion.ddp import sampler_indices
from companion_tools.pictures import (
    MAX_WIDTH,
    eval_counts,
    plot_eval_counts,
    plot_orders,
    readers,
    record_orders,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch5


@pytest.mark.parametrize("n, p", [(10, 3), (12, 4), (7, 2)])
def test_orders_with_and_without_set_epoch(n, p):
    with_epoch, without = record_orders(n, p, 3), record_orders(n, p, 3, set_epoch=False)
    assert with_epoch == [sampler_indices(range(n), p, e) for e in range(3)]
    assert without == [sampler_indices(range(n), p, 0)] * 3
    assert with_epoch[1] != with_epoch[0]
    for shares in with_epoch:
        who = readers(shares, n)
        assert all(who) and sum(map(len, who)) == -(-n // p) * p  # padded to a multiple of p


def test_eval_counts_show_the_padding_that_eval_indices_avoids():
    counts = eval_counts(10, 3)
    totals = {way: [sum(c) for c in zip(*rows)] for way, rows in counts.items()}
    assert totals["eval_indices"] == [1] * 10
    assert totals["DistributedSampler"] == [2, 2] + [1] * 8


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        record_orders(10, 0, 2)


def test_figures_fit_the_page():
    fig = plot_orders(record_orders(10, 3, 2), record_orders(10, 3, 2, set_epoch=False), 10)
    assert fig.get_size_inches()[0] <= MAX_WIDTH and fig.axes[1].get_xlabel()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["epoch 0", "epoch 1"]
    plt.close(fig)
    fig = plot_eval_counts(eval_counts(10, 3))
    assert fig.get_size_inches()[0] <= MAX_WIDTH and fig.axes[0].get_ylabel()
    assert fig.axes[-1].get_legend() is not None
    plt.close(fig)
