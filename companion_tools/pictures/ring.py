"""The all-reduces of chapter 3 drawn from their own traces: steps x ranks.

Used in: chapter 3.

:func:`record_allreduce` runs one of the hand-written all-reduces on worker
processes, each rank starting from ``[1, 2, 3, ...] * 10**rank``, with the
opt-in ``trace`` of :mod:`companion.collectives.trace` switched on. Every
digit of a value then names a rank that contributed to it
(:func:`contributors`): 303 at position 2 holds the values of ranks 0 and 2.
:func:`plot_allreduce` draws the recorded steps as a grid, one row per step
and one block of boxes per rank; :func:`rank_load` and :func:`plot_load` add
up what each rank sent and received.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from companion.collectives.tour import TRACED, trace_allreduce
from companion.collectives.trace import Step, link_load
from companion.runtime.launcher import launch

from .style import figure, text_color

__all__ = [
    "record_allreduce",
    "contributors",
    "timeline",
    "holdings",
    "row_labels",
    "rank_load",
    "plot_allreduce",
    "plot_load",
]

SENT, RECEIVED = "#d62728", "black"  # edge colours of the boxes that travelled


def record_allreduce(algorithm: str, world_size: int = 4, **launch_kwargs) -> list[list[Step]]:
    """Each rank's steps of ``algorithm`` (one of ``TRACED``), recorded on worker processes."""
    if algorithm not in TRACED:
        raise ValueError(f"cannot trace {algorithm!r}; choose from {list(TRACED)}")
    return launch(trace_allreduce, world_size, algorithm, **launch_kwargs)


def contributors(value: float, position: int) -> list[int]:
    """The ranks whose starting values add up to ``value`` at ``position``.

    Rank ``r`` started with ``(position + 1) * 10**r`` there, so the digits of
    ``value / (position + 1)`` are ones and zeros; a digit above one would
    mean a rank counted twice, and raises ``ValueError``.
    """
    unit, whole = position + 1, round(value)
    if whole != value or whole % unit or whole < 0:
        raise ValueError(f"{value} at position {position} is not a sum of starting values")
    ranks, digits, rank = [], whole // unit, 0
    while digits:
        digits, digit = divmod(digits, 10)
        if digit > 1:
            raise ValueError(f"{value} at position {position} counts rank {rank} {digit} times")
        if digit:
            ranks.append(rank)
        rank += 1
    return ranks


def timeline(traces: Sequence[Sequence[Step]]) -> list[list[Step | None]]:
    """Rows: the start, then every step; columns: ranks; ``None`` where a rank sat out."""
    n_rows = 2 + max(s.step for steps in traces for s in steps)
    rows: list[list[Step | None]] = [[None] * len(traces) for _ in range(n_rows)]
    for rank, steps in enumerate(traces):
        for s in steps:
            rows[s.step + 1][rank] = s
    return rows


def holdings(traces: Sequence[Sequence[Step]]) -> list[list[tuple[float, ...]]]:
    """What each rank holds after each row of :func:`timeline` (idle ranks keep theirs)."""
    rows, held = [], [None] * len(traces)
    for row in timeline(traces):
        held = [s.after if s is not None else h for s, h in zip(row, held)]
        rows.append(list(held))
    return rows


def row_labels(traces: Sequence[Sequence[Step]]) -> list[str]:
    """``"start"``, then each step's phase, numbered within the phase."""
    labels, seen = [], {}
    for row in timeline(traces):
        phase = next(s.phase for s in row if s is not None)
        seen[phase] = seen.get(phase, 0) + 1
        labels.append(phase if phase == "start" else f"{phase} {seen[phase]}")
    return labels


def rank_load(traces: Sequence[Sequence[Step]]) -> list[tuple[Fraction, Fraction]]:
    """``(sent, received)`` by each rank, as multiples of the tensor's size ``n``."""
    n = len(traces[0][0].after)
    load = link_load(s for steps in traces for s in steps)
    return [
        (
            Fraction(sum(v for (a, _), v in load.items() if a == rank), n),
            Fraction(sum(v for (_, b), v in load.items() if b == rank), n),
        )
        for rank in range(len(traces))
    ]


def _note(ax, s: Step, x0: float, y: float) -> None:
    """The boxes that travelled in step ``s``: red dashed edge if sent, black if received."""
    from matplotlib.patches import Rectangle

    notes = {}
    for rng, edge, style, word, peer in (
        (s.sent, SENT, "--", "to", s.sent_to),
        (s.received, RECEIVED, "-", "from", s.received_from),
    ):
        if rng is None or rng[1] == rng[0]:
            continue
        ax.add_patch(
            Rectangle(
                (x0 + rng[0] + 0.04, y + 0.04),
                rng[1] - rng[0] - 0.08,
                0.72,
                fill=False,
                edgecolor=edge,
                linewidth=2.2,
                linestyle=style,
            )
        )
        notes.setdefault(rng, []).append(f"{word} {peer}")
    for (a, b), words in notes.items():
        text = f"swap {s.sent_to}" if len(words) == 2 else words[0]
        ax.text(x0 + (a + b) / 2, y - 0.08, text, ha="center", va="top", fontsize=7)


def plot_allreduce(traces: Sequence[Sequence[Step]], title: str | None = None):
    """The recorded all-reduce as a grid: rows are steps, each rank a block of boxes.

    ``traces`` comes from :func:`record_allreduce` (the shades decode its
    starting values with :func:`contributors`).

    Box ``i`` of a rank is element ``i`` of its tensor after the step, its
    value written in it and its shade the number of ranks summed into it
    (darkest: all of them, the final result). A red dashed edge marks what
    the rank sent in that step, a black edge what it received; ranks that
    sat the step out are faded. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    p, n = len(traces), len(traces[0][0].after)
    rows, held, labels = timeline(traces), holdings(traces), row_labels(traces)
    fig, ax = figure(9.0, 0.62 * len(rows) + 1.3)
    cmap, width = plt.get_cmap("Blues"), n + 0.8
    shade = [cmap(0.2 + 0.75 * k / max(p - 1, 1)) for k in range(p)]
    for i, (row, state) in enumerate(zip(rows, held)):
        y = -1.25 * i
        for rank, (s, values) in enumerate(zip(row, state)):
            x0, idle = rank * width, s is None
            for pos, value in enumerate(values):
                fill = shade[len(contributors(value, pos)) - 1]
                ax.add_patch(
                    Rectangle(
                        (x0 + pos, y),
                        0.92,
                        0.8,
                        facecolor=fill,
                        alpha=0.3 if idle else 1.0,
                        edgecolor="white",
                    )
                )
                ax.text(
                    x0 + pos + 0.46,
                    y + 0.4,
                    f"{value:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="grey" if idle else text_color(fill),
                )
            if idle:
                ax.text(
                    x0 + n / 2, y - 0.08, "idle", ha="center", va="top", fontsize=7, color="grey"
                )
            elif s.phase != "start":
                _note(ax, s, x0, y)
    ax.set_xlim(-0.2, p * width - 0.6)
    ax.set_ylim(-1.25 * (len(rows) - 1) - 0.5, 1.0)
    ax.set_yticks([-1.25 * i + 0.4 for i in range(len(rows))], labels, fontsize=8)
    ax.set_xticks([r * width + n / 2 for r in range(p)], [f"rank {r}" for r in range(p)])
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [
        Patch(color=shade[k], label=f"{k + 1} rank{'s' if k else ''} summed") for k in range(p)
    ]
    handles += [
        Patch(fill=False, edgecolor=SENT, linestyle="--", linewidth=2, label="sent"),
        Patch(fill=False, edgecolor=RECEIVED, linewidth=2, label="received"),
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=len(handles),
        fontsize=7,
        frameon=False,
    )
    ax.set_title(title or f"all-reduce on {p} ranks, state after each step", fontsize=10)
    fig.tight_layout()
    return fig


def plot_load(loads: dict[str, Sequence[tuple[Fraction, Fraction]]], title: str | None = None):
    """Bars: what each rank sent, as a multiple of ``n``, per algorithm (:func:`rank_load`)."""
    fig, ax = figure(6.0, 3.0)
    names = list(loads)
    p = len(next(iter(loads.values())))
    bar = 0.8 / len(names)
    for j, name in enumerate(names):
        xs = [r + (j - (len(names) - 1) / 2) * bar for r in range(p)]
        sent = [float(s) for s, _ in loads[name]]
        ax.bar(xs, sent, bar * 0.95, label=name)
    ax.set_xticks(range(p), [f"rank {r}" for r in range(p)])
    ax.set_ylabel("sent, in multiples of n")
    ax.set_xlabel(f"{p} ranks, each holding a tensor of n bytes")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "what each rank sends in one all-reduce", fontsize=10)
    fig.tight_layout()
    return fig
