"""The study's plots: accuracy and time, speed-up and efficiency, accuracy and batch.

Used in: chapter 7. Every function takes the :class:`~companion.study.analysis.Point`
list of :func:`~companion.study.analysis.aggregate` and returns the figure;
the title names the hardware and profile of the records, the legend their
precision. Points in two precisions are refused unless ``mix_precisions=True``;
then each line's label names its precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from ..core.figures import headroom, legend_below
from .analysis import Point, one_precision

__all__ = ["plot_lr_scaling", "plot_speedup", "plot_study"]

_STYLES = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
_ACCURACY = attrgetter("acc_min", "acc_mean", "acc_max")


def _by(points: Sequence[Point], key) -> dict:
    groups: dict = {}
    for p in points:
        groups.setdefault(key(p), []).append(p)
    return {k: sorted(v, key=lambda p: (p.n_devices, p.global_batch)) for k, v in groups.items()}


def _line(points: Sequence[Point], mix_precisions: bool):
    """What names a line: the method, with its precision when the points mix two."""
    precisions = one_precision(points, mix_precisions)
    if len(precisions) > 1:
        return precisions, lambda p: f"{p.method} ({p.precision})"
    return precisions, lambda p: p.method


def _finish(fig, axes, title: str, xlabel: str, precisions, xs=None, log2=False):
    for ax in axes:
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if log2:
            ax.set_xscale("log", base=2)
        if xs:
            ax.set_xticks(sorted(xs), [str(x) for x in sorted(xs)])
    fig.suptitle(title, fontsize=10)
    legend_below(fig, axes[0], title=f"precision: {' / '.join(precisions)}", title_fontsize=8)
    return fig


def _errorbar(ax, xs, ps: Sequence[Point], low_mid_high, **style) -> None:
    """``ax.errorbar`` of the middle of ``low_mid_high(p)``, the bar from low to high."""
    low, mid, high = zip(*map(low_mid_high, ps))
    err = [[m - lo for lo, m in zip(low, mid)], [hi - m for m, hi in zip(mid, high)]]
    ax.errorbar(xs, list(mid), yerr=err, capsize=3, **style)


def _accuracy_axis(ax, points: Sequence[Point], least: float = 0.2) -> None:
    """At least ``least`` of accuracy on the axis (within 0..1): a spread of 0.01 drawn
    over the whole height would make one point look like a cliff. A margin of 5% on
    each side keeps the caps of the widest bars inside the axes."""
    low, high = min(p.acc_min for p in points), max(p.acc_max for p in points)
    pad = max(least - (high - low), 0.1 * (high - low)) / 2
    low, high = max(0.0, low - pad), min(1.0, high + pad)
    ax.set_ylim(min(low, 1.0 - least), max(high, least))


def plot_study(points: Sequence[Point], title: str = "", mix_precisions: bool = False):
    """Test accuracy (mean, bar: lowest to highest seed) and s/epoch against devices."""
    import matplotlib.pyplot as plt

    precisions, name = _line(points, mix_precisions)
    fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(9, 3.4))
    groups = _by([p for p in points if p.method != "reference"], name)
    for i, (method, ps) in enumerate(groups.items()):
        marker, dash = _STYLES[i % len(_STYLES)]
        xs = [p.n_devices + 0.06 * (i - (len(groups) - 1) / 2) for p in ps]
        style = dict(marker=marker, linestyle=dash, label=method)
        _errorbar(ax_acc, xs, ps, _ACCURACY, **style)
        _errorbar(ax_time, xs, ps, attrgetter("sec_min", "sec_per_epoch", "sec_max"), **style)
    ax_acc.set_ylabel("test accuracy\n(mean over seeds, bar: range)")
    _accuracy_axis(ax_acc, points)
    ax_time.set_ylabel("seconds per epoch\n(mean, bar: fastest to slowest)")
    headroom(ax_time)
    counts = {p.n_devices for p in points}
    return _finish(fig, (ax_acc, ax_time), title, "number of devices", precisions, counts)


def plot_speedup(points: Sequence[Point], title: str = "", mix_precisions: bool = False):
    """Speed-up and scaling efficiency against devices, with the ideal line; a point the
    table flags (:attr:`~companion.study.analysis.Point.flags`) is circled and labelled."""
    import matplotlib.pyplot as plt

    precisions, name = _line(points, mix_precisions)
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(9, 3.4))
    measured = [p for p in points if p.speedup == p.speedup]  # not NaN
    counts = sorted({p.n_devices for p in measured})
    ax_s.plot(counts, counts, color="gray", linestyle=":", label="ideal")
    ax_e.plot(counts, [1.0] * len(counts), color="gray", linestyle=":", label="ideal")
    flagged = False
    for i, (method, ps) in enumerate(_by(measured, name).items()):
        marker, dash = _STYLES[i % len(_STYLES)]
        ks = [p.n_devices for p in ps]
        style = dict(marker=marker, linestyle=dash, label=method)
        _errorbar(ax_s, ks, ps, attrgetter("speedup_min", "speedup", "speedup_max"), **style)
        ax_e.plot(ks, [p.efficiency for p in ps], **style)
        for p in ps:  # what the table flags, the picture flags too
            if p.flags:
                label = "" if flagged else "flagged: not a speed-up (see the table)"
                ax_s.plot(p.n_devices, p.speedup, "o", ms=11, mfc="none", mec="red", label=label)
                ax_s.annotate(
                    ", ".join(p.flags),
                    (p.n_devices, p.speedup),
                    xytext=(6, -10),
                    textcoords="offset points",
                    fontsize=7,
                    color="red",
                )
                flagged = True
    ax_s.set_ylabel("speed-up over 1 device\n(samples/s; bar: range of epochs)")
    ax_e.set_ylabel("scaling efficiency\n(speed-up / devices)")
    headroom(ax_s)
    ax_e.set_ylim(0, max(1.1, 1.05 * max((p.efficiency for p in measured), default=1.0)))
    return _finish(fig, (ax_s, ax_e), title, "number of devices", precisions, counts)


def plot_lr_scaling(points: Sequence[Point], title: str = "", mix_precisions: bool = False):
    """Test accuracy against the global batch, one line per learning-rate rule."""
    import matplotlib.pyplot as plt

    precisions, _ = _line(points, mix_precisions)
    mixed = len(precisions) > 1
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    batches = {p.global_batch for p in points}
    groups = _by(points, lambda p: f"{p.lr_rule} ({p.precision})" if mixed else p.lr_rule)
    for i, (rule, ps) in enumerate(groups.items()):
        marker, dash = _STYLES[i % len(_STYLES)]
        ps = sorted(ps, key=lambda p: p.global_batch)
        _errorbar(
            ax,
            [p.global_batch for p in ps],
            ps,
            _ACCURACY,
            marker=marker,
            linestyle=dash,
            label=f"lr rule: {rule}",
        )
    ax.set_ylabel("test accuracy\n(mean over seeds, bar: range)")
    return _finish(fig, (ax,), title, "global batch (log scale)", precisions, batches, log2=True)
