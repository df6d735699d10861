"""Chapter 5's sampling drawn: who reads which sample, epoch by epoch, and the padding.

Used in: chapter 5.

:func:`record_orders` iterates torch's own ``DistributedSampler``, one per
rank, for several epochs, calling ``set_epoch`` before each epoch or, to show
the mistake, never. :func:`eval_counts` counts how often each test sample is
read by an unshuffled ``DistributedSampler`` (padded) and by
:func:`~companion.ddp.sampling.eval_indices` (not padded).
:func:`plot_orders` and :func:`plot_eval_counts` draw them.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.utils.data.distributed import DistributedSampler

from companion.core.checks import check_int
from companion.ddp.sampling import eval_indices

from .style import figure, rank_color

__all__ = ["record_orders", "readers", "eval_counts", "plot_orders", "plot_eval_counts"]

Orders = list[list[list[int]]]  # orders[epoch][rank]: the indices that rank reads, in order


def record_orders(
    n: int, world_size: int, epochs: int, set_epoch: bool = True, seed: int = 0
) -> Orders:
    """What each rank's ``DistributedSampler`` yields over ``epochs`` epochs of ``n`` samples.

    One sampler per rank (``num_replicas`` and ``rank`` given, so no process
    group is needed), iterated once per epoch as a training loop does, with
    ``sampler.set_epoch(epoch)`` before each epoch only if ``set_epoch``.
    """
    for value, name in ((n, "n"), (world_size, "world_size"), (epochs, "epochs")):
        check_int(value, name)
    samplers = [DistributedSampler(range(n), world_size, r, seed=seed) for r in range(world_size)]
    orders = []
    for epoch in range(epochs):
        if set_epoch:
            for sampler in samplers:
                sampler.set_epoch(epoch)
        orders.append([list(sampler) for sampler in samplers])
    return orders


def readers(shares: Sequence[Sequence[int]], n: int) -> list[list[tuple[int, int]]]:
    """For each of ``n`` samples, who reads it in one epoch: ``(rank, position)`` pairs."""
    who: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for rank, share in enumerate(shares):
        for position, i in enumerate(share):
            who[i].append((rank, position))
    return who


def eval_counts(n: int, world_size: int) -> dict[str, list[list[int]]]:
    """``counts[way][rank][i]``: how often rank ``rank`` reads test sample ``i``.

    ``way`` is ``"DistributedSampler"`` (unshuffled, padded) or
    ``"eval_indices"`` (what ``evaluate_distributed`` uses: no padding).
    """
    check_int(n, "n", 1, "the test set's sample count")
    check_int(world_size, "world_size")
    ways = {
        "DistributedSampler": [
            list(DistributedSampler(range(n), world_size, r, shuffle=False))
            for r in range(world_size)
        ],
        "eval_indices": [list(eval_indices(n, r, world_size)) for r in range(world_size)],
    }
    return {
        way: [[share.count(i) for i in range(n)] for share in shares]
        for way, shares in ways.items()
    }


def _panel(ax, orders: Orders, n: int, title: str) -> None:
    from matplotlib.patches import Rectangle

    for epoch, shares in enumerate(orders):
        for i, who in enumerate(readers(shares, n)):
            for j, (rank, position) in enumerate(who):
                h = 0.9 / len(who)
                ax.add_patch(
                    Rectangle(
                        (i - 0.45, epoch - 0.45 + j * h),
                        0.9,
                        h,
                        facecolor=rank_color(rank),
                        edgecolor="white",
                    )
                )
                ax.text(
                    i,
                    epoch - 0.45 + (j + 0.5) * h,
                    str(position),
                    ha="center",
                    va="center",
                    fontsize=8 if len(who) == 1 else 6.5,
                    color="white",
                )
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(len(orders) - 0.5, -0.5)
    ax.set_xticks(range(n))
    ax.set_yticks(range(len(orders)), [f"epoch {e}" for e in range(len(orders))])
    ax.set_title(title, fontsize=9)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(length=0)


def plot_orders(with_set_epoch: Orders, without: Orders, n: int, title: str | None = None):
    """Two grids, epochs x samples: each cell coloured by the rank that reads the sample.

    The number in a cell is the sample's position in that rank's order. A
    cell split in two is a sample read twice in the epoch (the padding).
    Top: ``set_epoch`` called each epoch; bottom: never called. Returns the figure.
    """
    from matplotlib.patches import Patch

    epochs, p = len(with_set_epoch), len(with_set_epoch[0])
    fig, (top, bottom) = figure(9.0, 2 * (0.42 * epochs + 0.7) + 0.9, nrows=2, sharex=True)
    _panel(top, with_set_epoch, n, "sampler.set_epoch(epoch) before every epoch")
    _panel(bottom, without, n, "set_epoch never called: every epoch replays epoch 0")
    bottom.set_xlabel(
        "index of the sample in the data set (numbers: position in the rank's "
        "order; split cells: read twice, padding)"
    )
    handles = [Patch(color=rank_color(r), label=f"rank {r}") for r in range(p)]
    fig.legend(handles=handles, loc="upper right", ncol=p, fontsize=8, frameon=False)
    fig.suptitle(title or f"DistributedSampler: {n} samples, {p} ranks", fontsize=10, x=0.3)
    fig.tight_layout()
    return fig


def plot_eval_counts(counts: dict[str, list[list[int]]], title: str | None = None):
    """Stacked bars per test sample: how often each rank reads it, for each way."""
    fig, axes = figure(9.0, 2.8, ncols=len(counts), sharey=True)
    for ax, (way, per_rank) in zip(axes, counts.items()):
        n, bottom = len(per_rank[0]), [0] * len(per_rank[0])
        for rank, row in enumerate(per_rank):
            ax.bar(range(n), row, bottom=bottom, color=rank_color(rank), label=f"rank {rank}")
            bottom = [b + c for b, c in zip(bottom, row)]
        ax.set_title(f"{way}: {sum(bottom)} reads of {n} samples", fontsize=9)
        ax.set_xticks(range(n))
        ax.set_xlabel("index of the test sample")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("times counted")
    most = max(sum(column) for per_rank in counts.values() for column in zip(*per_rank))
    axes[0].set_yticks(range(most + 1))
    axes[-1].legend(fontsize=8)
    fig.suptitle(title or "evaluation: each test sample must count once", fontsize=10)
    fig.tight_layout()
    return fig
