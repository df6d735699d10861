"""Chapter 3's all-reduce pictures: decoded from real traces, and drawn within the page."""

from fractions import Fraction

import matplotlib
import pytest

from companion_tools.pictures import (
    MAX_WIDTH,
    contributors,
    holdings,
    plot_allreduce,
    plot_load,
    rank_load,
    record_allreduce,
    row_labels,
    timeline,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch3


@pytest.fixture(scope="module")
def runs():
    return {name: record_allreduce(name, 4) for name in ("naive", "ring", "recursive doubling")}


def test_contributors_reads_the_digits_and_refuses_double_counts():
    assert contributors(303, 2) == [0, 2]
    assert contributors(4, 3) == [0] and contributors(4444, 3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="counts rank 0 2 times"):
        contributors(2, 0)
    with pytest.raises(ValueError, match="not a sum"):
        contributors(5, 1)


def test_record_allreduce_refuses_an_untraced_algorithm():
    with pytest.raises(ValueError, match="cannot trace"):
        record_allreduce("dist.all_reduce", 2)


def test_the_ring_grid_has_a_row_per_step_and_ends_complete(runs):
    ring = runs["ring"]
    assert row_labels(ring) == ["start"] + [f"reduce-scatter {i}" for i in (1, 2, 3)] + [
        f"all-gather {i}" for i in (1, 2, 3)
    ]
    held = holdings(ring)
    assert len(held) == 7 and all(len(row) == 4 for row in held)
    # after reduce-scatter (row 3) rank r holds chunk r + 1 summed over all 4 ranks
    assert [contributors(held[3][r][(r + 1) % 4], (r + 1) % 4) for r in range(4)] == [
        [0, 1, 2, 3]
    ] * 4
    assert all(
        contributors(v, i) == [0, 1, 2, 3]
        for row in held[-1:]
        for x in row
        for i, v in enumerate(x)
    )


def test_idle_ranks_keep_what_they_held(runs):
    naive = runs["naive"]
    rows, held = timeline(naive), holdings(naive)
    assert rows[1][2] is None and held[1][2] == naive[2][0].after  # rank 2 waits in step 0


def test_rank_load_in_multiples_of_n(runs):
    assert rank_load(runs["ring"]) == [(Fraction(3, 2), Fraction(3, 2))] * 4  # 2 (p-1) / p
    assert rank_load(runs["naive"]) == [(3, 3)] + [(1, 1)] * 3  # rank 0: p - 1 both ways
    assert rank_load(runs["recursive doubling"]) == [(2, 2)] * 4  # log2 p


def test_figures_fit_the_page_and_are_labelled(runs):
    for name, traces in runs.items():
        fig = plot_allreduce(traces, title=name)
        ax = fig.axes[0]
        assert fig.get_size_inches()[0] <= MAX_WIDTH
        assert [t.get_text() for t in ax.get_xticklabels()] == [f"rank {r}" for r in range(4)]
        assert ax.get_legend() is not None and ax.get_title() == name
        plt.close(fig)
    fig = plot_load({name: rank_load(t) for name, t in runs.items()})
    assert fig.axes[0].get_ylabel() and len(fig.axes[0].get_legend().get_texts()) == 3
    plt.close(fig)
