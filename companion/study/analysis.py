"""The study's numbers: mean and spread over seeds, speed-up, scaling efficiency.

Used in: chapter 7.

A run's accuracy is :func:`~companion.core.results.final_accuracy` (the mean
of its last half of the epochs); a point of the study is the mean of that
over the seeds, with their standard deviation and range. The speed-up of
``k`` devices is the throughput (samples per second) at ``k`` over the
throughput at 1 device of the same method, lr rule and batch: the same global
batch in strong scaling, the same per-device batch in weak scaling (a
1-device run on another batch is another computation, not a base). The
scaling efficiency is the
speed-up over ``k``: 1 is the ideal (``k`` devices, ``k`` times the samples
per second), and in strong scaling the speed-up is also the time per epoch
at 1 device over the time at ``k``.

Time is what load on the machine disturbs, so every point keeps the fastest
and slowest epoch of all its seeds, and every speed-up the range those allow.
A speed-up whose range is wider than its distance from 1 says nothing about
speed: the table marks it instead of printing an efficiency.

Precision (and memory layout) is part of what a run computes: bf16 is faster
and less exact than fp32, so a table that set one beside the other would
credit the method with what the number format did. Every point names its
precision, and :func:`aggregate` refuses records in two precisions unless
``mix_precisions=True`` asks for that comparison.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean, stdev

from ..core.noise import Ratio, judge
from ..core.results import CPU_SHARE_QUIET, VIRTUAL_NOTE, final_accuracy
from .driver import StudyRecord

__all__ = ["Point", "aggregate", "speedups", "spread", "table"]


@dataclass(frozen=True)
class Point:
    """One method at one device count (and lr rule), over its seeds."""

    method: str
    n_devices: int
    global_batch: int
    lr_rule: str
    seeds: int
    acc_mean: float
    acc_std: float
    acc_min: float
    acc_max: float
    sec_per_epoch: float
    samples_per_sec: float
    sec_min: float  # the fastest epoch of every seed
    sec_max: float  # the slowest
    scaling: str = "strong"
    precision: str = "fp32"  # and memory layout, as in the records
    speedup: float = float("nan")
    efficiency: float = float("nan")
    speedup_min: float = float("nan")  # with the slowest epoch at k, the fastest at 1
    speedup_max: float = float("nan")
    epochs: int = 0  # timed epochs (over every seed)
    cpu_share: float | None = None  # 1 device on a CPU: its epochs' lowest (Record.cpu_share)
    base_busy: bool = False  # its 1-device base did not get its cores
    virtual: bool = False  # its devices were virtual (Record.virtual)

    @property
    def busy(self) -> bool:
        """This 1-device run, or the base of this speed-up, got less than
        :data:`~companion.core.noise.CPU_SHARE_QUIET` of a core while its threads were ready
        to run (:class:`~companion.core.training.Timer`)."""
        return self.base_busy or (self.cpu_share is not None and self.cpu_share < CPU_SHARE_QUIET)

    @property
    def noisy(self) -> bool:
        """The speed-up's range falls on both sides of 1: the book's one noise rule
        (:func:`companion.core.noise.judge`); the 1-device base is never noisy."""
        if self.n_devices == 1 or self.speedup != self.speedup:
            return False
        low, high = self.speedup_min, self.speedup_max
        return judge(Ratio(self.speedup, low, high, self.epochs), 1.0).noise

    @property
    def flags(self) -> tuple[str, ...]:
        """Every reason why this point's speed-up cannot be read as one (see FLAGS)."""
        measured = self.n_devices > 1 and self.speedup == self.speedup
        found = {
            "busy": self.busy,
            "over N": measured and self.speedup > self.n_devices,
            "1 epoch": measured and self.epochs == 1,
            "noise": measured and self.epochs > 1 and self.noisy,
        }
        return tuple(flag for flag, on in found.items() if on)

    @property
    def flag(self) -> str:
        """The first of :attr:`flags` ('' if the speed-up can be read as one)."""
        return self.flags[0] if self.flags else ""


FLAGS = {
    "busy": "the 1-device run's ready threads waited for a core over 10% of the time: other "
    "work slowed it, and every speed-up against it is inflated",
    "noise": "the speed-up's range (fastest to slowest epochs) falls on both sides of 1",
    "over N": "faster than N devices can be: the 1-device run was slowed by other work",
    "1 epoch": "one timed epoch: no range to judge the speed-up by",
}
QUIET = "re-measure flagged rows on a quiet machine (nothing else running, load < cores - 1)"


def spread(values: Sequence[float]) -> tuple[float, float, float, float]:
    """``(mean, sample standard deviation, lowest, highest)``; the deviation of one is 0."""
    if not values:
        raise ValueError("spread needs at least one value")
    sd = stdev(values) if len(values) > 1 else 0.0
    return mean(values), sd, min(values), max(values)


def one_precision(runs: Sequence, mix_precisions: bool = False) -> list[str]:
    """The precisions of ``runs`` (records or points), sorted; two or more raise a
    ``ValueError`` unless ``mix_precisions`` asks to compare them."""
    found = sorted({r.precision for r in runs})
    if len(found) > 1 and not mix_precisions:
        raise ValueError(
            f"these runs mix precisions {found}: a comparison across them measures the "
            f"number format as much as the method; keep one precision (plan(..., "
            f"precision=...)), or pass mix_precisions=True to compare them on purpose"
        )
    return found


def aggregate(records: Sequence[StudyRecord], mix_precisions: bool = False) -> list[Point]:
    """One :class:`Point` per (method, device count, global batch, lr rule, scaling,
    precision), with speed-ups; records in two precisions need ``mix_precisions=True``."""
    if not records:
        raise ValueError("aggregate needs records: run a study or load one")
    one_precision(records, mix_precisions)
    runs: dict[tuple, dict[int, list[StudyRecord]]] = {}
    for r in records:
        key = (r.method, r.n_devices, r.global_batch, r.lr_rule, r.scaling, r.precision)
        runs.setdefault(key, {}).setdefault(r.seed, []).append(r)
    points = []
    for (method, k, batch, rule, scaling, precision), by_seed in runs.items():
        accs = [final_accuracy(run)[0] for run in by_seed.values()]
        epochs = [r for run in by_seed.values() for r in run]
        seconds = sum(r.sec_per_epoch for r in epochs)
        samples = sum(r.samples_per_sec * r.sec_per_epoch for r in epochs)
        acc = dict(zip(("acc_mean", "acc_std", "acc_min", "acc_max"), spread(accs)))
        points.append(
            Point(
                method=method,
                n_devices=k,
                global_batch=batch,
                lr_rule=rule,
                scaling=scaling,
                precision=precision,
                seeds=len(by_seed),
                sec_per_epoch=seconds / len(epochs),
                samples_per_sec=samples / seconds,
                **acc,
                sec_min=min(r.sec_per_epoch for r in epochs),
                sec_max=max(r.sec_per_epoch for r in epochs),
                epochs=len(epochs),
                cpu_share=min(shares) if (shares := _shares(epochs)) else None,
                virtual=any(r.virtual for r in epochs),
            )
        )
    return speedups(points)


def _shares(records: Sequence[StudyRecord]) -> list[float]:
    return [r.cpu_share for r in records if r.cpu_share is not None]


def _base_key(p: Point) -> tuple:
    """What a point's 1-device base shares with it: the global batch, or in weak scaling
    the per-device batch."""
    batch = p.global_batch // p.n_devices if p.scaling == "weak" else p.global_batch
    return p.method, p.lr_rule, p.scaling, p.precision, batch


def speedups(points: Sequence[Point]) -> list[Point]:
    """``points`` with speed-up and efficiency against their 1-device base.

    The base is the same method, lr rule and precision on 1 device with the same global
    batch (strong scaling) or per-device batch (weak scaling); a point without
    one gets none (NaN).
    """
    base = {_base_key(p): p for p in points if p.n_devices == 1}
    out = []
    for p in points:
        one = base.get(_base_key(p))
        if one is None or p.method == "reference":  # one device standing in for k
            out.append(p)
            continue
        s = p.samples_per_sec / one.samples_per_sec
        # throughput scales as 1 / time: the extremes of each side bound the ratio
        low = s * (p.sec_per_epoch / p.sec_max) * (one.sec_min / one.sec_per_epoch)
        high = s * (p.sec_per_epoch / p.sec_min) * (one.sec_max / one.sec_per_epoch)
        out.append(
            Point(
                **{
                    **p.__dict__,
                    "speedup": s,
                    "efficiency": s / p.n_devices,
                    "speedup_min": low,
                    "speedup_max": high,
                    "base_busy": one.busy,
                }
            )
        )
    return sorted(
        out, key=lambda p: (p.method, p.precision, p.lr_rule, p.n_devices, p.global_batch)
    )


def table(points: Sequence[Point]) -> str:
    """The points as a text table, one line each.

    s/epoch is the mean with the fastest and slowest epoch; the speed-up
    (samples per second over 1 device's) has its range. A row whose speed-up
    cannot be read as one (:attr:`Point.flags`: busy, over N, 1 epoch, noise) shows
    it in parentheses and its flags in place of the efficiency, and the table
    ends with what each flag means; a ``v`` marks virtual devices. A standard
    deviation is shown only over two seeds or more. The precision is one line below the rows when every row
    has the same, else a last column (the rows then pass the page's 100 characters).
    """
    one = len({p.precision for p in points}) == 1
    head = (
        f"{'method':<12}{'devices':>8}{'batch':>6}{'lr rule':>8}{'seeds':>6}"
        f"{'test acc':>9}{'(sd)':>8}{'s/epoch':>8}{'[min-max]':>12}{'speed-up':>9}{'effic.':>12}"
    )
    lines = [head if one else head + "  precision"]
    for p in points:
        sd = f"({p.acc_std:.3f})" if p.seeds > 1 else "-"
        speedup = f"({p.speedup:.2f})" if p.flag else f"{p.speedup:.2f}"
        devices = f"{p.n_devices}{'v' if p.virtual else ''}"
        lines.append(
            f"{p.method:<12}{devices:>8}{p.global_batch:>6}{p.lr_rule:>8}{p.seeds:>6}"
            f"{p.acc_mean:>9.3f}{sd:>8}{p.sec_per_epoch:>8.3f}"
            f"{f'[{p.sec_min:.2f}-{p.sec_max:.2f}]':>12}{speedup:>9}"
            f"{','.join(p.flags) or f'{p.efficiency:.0%}':>12}"
            + ("" if one else f"  {p.precision}")
        )
    if one and points:
        lines.append(f"precision: {points[0].precision}")
    flags = [flag for flag in FLAGS if any(flag in p.flags for p in points)]
    notes = [f"{flag}: {FLAGS[flag]}" for flag in flags]
    notes += [f"a flagged row's speed-up is in parentheses; {QUIET}"] if flags else []
    notes += [VIRTUAL_NOTE] if any(p.virtual for p in points) else []
    lines += [textwrap.fill(note, 88, subsequent_indent="  ") for note in notes]  # the page's width
    return "\n".join(lines)
