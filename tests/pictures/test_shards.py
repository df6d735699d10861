"""Chapter 3's DataPartitioner picture: every sample in at most one shard."""

import matplotlib
import pytest

from companion.collectives import DataPartitioner
from companion_tools.pictures import MAX_WIDTH, plot_shards, shard_of

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch3


def test_shard_of_names_each_samples_shard():
    parts = DataPartitioner.even(range(30), 4)
    owner = shard_of(parts)
    assert [owner.count(s) for s in range(4)] == [7] * 4 and owner.count(None) == 2
    for s, idx in enumerate(parts.partitions):
        assert all(owner[i] == s for i in idx.tolist())


def test_shard_of_catches_a_sample_in_two_shards():
    parts = DataPartitioner.even(range(8), 2)
    parts.partitions[1][0] = parts.partitions[0][0]
    with pytest.raises(ValueError, match="is in shards 0 and 1"):
        shard_of(parts)


def test_the_figure_fits_the_page():
    fig = plot_shards(DataPartitioner.even(range(30), 4))
    ax = fig.axes[0]
    assert fig.get_size_inches()[0] <= MAX_WIDTH and ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "left out"
    plt.close(fig)
