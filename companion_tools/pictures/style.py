"""What every picture shares: page width, one colour per device or rank, small helpers.

Used in: chapters 2, 3, 4 and 5 (through the other ``pictures`` modules).

Figures are at most :data:`MAX_WIDTH` inches wide at matplotlib's default
100 dpi, so they fit the book's page (about 900 pixels) unscaled.
"""

from __future__ import annotations

__all__ = ["MAX_WIDTH", "RANK_COLORS", "rank_color", "figure", "text_color"]

MAX_WIDTH = 9.0  # inches; at 100 dpi, 900 pixels
# One colour per device or rank (matplotlib's tab10, without its red and grey,
# which the pictures keep for sent messages and idle ranks).
RANK_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
]


def rank_color(i: int) -> str:
    """The colour of device or rank ``i``."""
    return RANK_COLORS[i % len(RANK_COLORS)]


def figure(width: float, height: float, **subplots):
    """``plt.subplots`` with a size checked against the page: ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    if not 0 < width <= MAX_WIDTH or height <= 0:
        raise ValueError(
            f"a figure of {width} x {height} inches does not fit the page: keep the "
            f"width within {MAX_WIDTH} inches (900 pixels at 100 dpi)"
        )
    return plt.subplots(figsize=(width, height), **subplots)


def text_color(rgba) -> str:
    """Black or white, whichever reads better on a fill of colour ``rgba``."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
