"""Two rules every plot of the book follows: the legend never covers data, and no point
sits on the frame.

Used in: every chapter's plots (:func:`~.results.plot_scaling`, the study's plots,
chapter 9's memory bars).
"""

from __future__ import annotations

import math

__all__ = ["legend_below", "headroom"]


def headroom(ax, bottom: float = 0.0, room: float = 0.08) -> None:
    """Start the y axis at ``bottom`` and end it ``room`` (a fraction of the span) above
    the highest thing drawn, error bars included: ``set_ylim(bottom=0)`` alone keeps the
    old top, which puts the highest point on the frame."""
    top = ax.dataLim.y1
    if not math.isfinite(top) or top <= bottom:
        top = bottom + 1.0
    ax.set_ylim(bottom, top + room * (top - bottom))


def legend_below(fig, ax, ncol: int = 4, **options) -> None:
    """One legend for the figure, under the axes (the handles of ``ax``), and the axes
    laid out above it, so that no legend box hides a bar, a point or an error bar."""
    handles, labels = ax.get_legend_handles_labels()
    for each in fig.axes:
        if each.get_legend() is not None:
            each.get_legend().remove()
    if not handles:
        fig.tight_layout()
        return
    ncol = min(ncol, len(labels))
    rows = -(-len(labels) // ncol) + (1 if options.get("title") else 0)
    height = fig.get_size_inches()[1]
    strip = (0.2 + 0.17 * rows) / height  # inches per row of 8-point text, as a fraction
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False, **options)
    fig.tight_layout(rect=(0, strip, 1, 1))
