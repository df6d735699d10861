"""``DataPartitioner``'s shards drawn: which sample of the data set goes to which rank.

Used in: chapter 3.
"""

from __future__ import annotations

from companion.collectives.partition import DataPartitioner

from .style import figure, rank_color

__all__ = ["shard_of", "plot_shards"]


def shard_of(partitioner: DataPartitioner) -> list[int | None]:
    """For each sample of the data set, the shard holding it (``None``: left out).

    Raises ``ValueError`` if a sample sits in two shards.
    """
    owner: list[int | None] = [None] * len(partitioner.dataset)
    for shard, indices in enumerate(partitioner.partitions):
        for i in indices.tolist():
            if owner[i] is not None:
                raise ValueError(f"sample {i} is in shards {owner[i]} and {shard}")
            owner[i] = shard
    return owner


def plot_shards(partitioner: DataPartitioner, title: str | None = None):
    """One row per shard, a mark at each sample it holds; the samples left out below.

    The x axis is the sample's index in the data set; each mark is labelled
    with the sample's position within its shard, the order the rank reads it
    in. Returns the figure.
    """
    owner = shard_of(partitioner)
    n, k = len(owner), len(partitioner)
    fig, ax = figure(9.0, 0.45 * (k + 1) + 1.3)
    for shard, indices in enumerate(partitioner.partitions):
        for position, i in enumerate(indices.tolist()):
            ax.scatter(i, shard, s=200, marker="s", color=rank_color(shard))
            ax.text(i, shard, str(position), ha="center", va="center", fontsize=7, color="white")
    left_out = [i for i, o in enumerate(owner) if o is None]
    ax.scatter(left_out, [k] * len(left_out), s=200, marker="s", color="lightgrey")
    ax.set_yticks(range(k + 1), [f"shard {s} (rank {s})" for s in range(k)] + ["left out"])
    ax.set_ylim(k + 0.6, -0.6)
    ax.set_xlim(-1, n)
    ax.set_xlabel("index of the sample in the data set (numbers: order within the shard)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or f"DataPartitioner: {n} samples in {k} shards", fontsize=10)
    fig.tight_layout()
    return fig
