"""Noise: when a ratio of two timings can be read, and the book's speed targets, in one place.

Used in: every benchmark (``python -m companion_tools.bench ...``), the study (chapter 7), and the
chapters that print a benchmark's verdict.

A time measured on a shared machine moves with whatever else runs there: on the book's
2-core CI machine one LeNet epoch took 0.24 s when the machine was quiet and 1.9-14.7 s
beside other work. So every comparison of two timings in this package is made the same way:

* the two sides take turns in each round, and who goes first rotates from round to round;
  each round gives one *paired* ratio (side A's time over side B's, both from that round);
* the ratio reported is the median of the rounds' ratios, with their lowest and highest
  (:class:`Ratio`);
* :func:`judge` reads it against a reference value, a target from :data:`TARGETS` or 1
  ("which side is faster"). It says ``met`` or ``missed`` (``below`` or ``above`` for 1)
  only when every round's ratio lies on the same side of the reference and the machine was
  quiet. Otherwise the verdict is ``noise``, with its reason: re-run on a quiet machine.

The machine counts as busy (:class:`Load`) when its 1-minute load average was above
``cores - 1`` before the measurement, or, after it, above ``cores - 1`` plus the busy
processes the measurement ran itself.

One process can also tell by itself (:func:`cpu_share`): Linux counts, for each thread, the
time it ran and the time it was ready to run but waited for a core. A quiet machine runs a
ready thread at once (a share near 1); beside other work the threads queue. Where the
measurement runs in the watching process, that share decides (below
:data:`CPU_SHARE_QUIET`: busy), as the load average still carries the last minute's work.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .checks import check_choice, check_int, check_positive
from .devices import cpu_cores

__all__ = [
    "rotated",
    "Ratio",
    "paired_ratio",
    "Target",
    "TARGETS",
    "Load",
    "LoadWatch",
    "load_average",
    "scheduler_times",
    "cpu_share",
    "CPU_SHARE_QUIET",
    "Verdict",
    "judge",
    "NOISE_RULE",
]

CPU_SHARE_QUIET = 0.9  # a process whose ready threads got a core less often was slowed by others

NOISE_RULE = (
    "noise: the rounds' ratios fall on both sides of the value they are judged against, or "
    "the machine was busy (1-minute load average above cores - 1 before, or above cores - 1 "
    "plus the measurement's own processes after; for a measurement in one process, its ready "
    "threads waited for a core over 10% of the time): re-run on a quiet machine"
)


def rotated(items: Sequence, r: int) -> list:
    """``items`` in the order of round ``r``: who goes first rotates from round to round."""
    if not items:
        raise ValueError("nothing to rotate: give the sides that take turns")
    k = r % len(items)
    return [*items[k:], *items[:k]]


@dataclass(frozen=True)
class Ratio:
    """The median of per-round ratios, with the lowest and the highest round."""

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Ratio:
        values = [float(r) for r in ratios]
        if not values or not all(math.isfinite(r) and r > 0 for r in values):
            raise ValueError(
                f"a ratio needs one or more positive, finite per-round values, got {values}"
            )
        return cls(statistics.median(values), min(values), max(values), len(values))

    def __format__(self, spec: str) -> str:
        """``f"{ratio:.3f}"``: the median and the range, each formatted with the spec."""
        spec = spec or ".2f"
        if self.rounds == 1:
            return f"{self.median:{spec}} (1 round)"
        return f"{self.median:{spec}} (rounds {self.low:{spec}}-{self.high:{spec}})"

    def __str__(self) -> str:
        return format(self, "")


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
    """:class:`Ratio` of ``numerator[r] / denominator[r]`` over rounds ``r`` (same length)."""
    if len(numerator) != len(denominator):
        raise ValueError(
            f"paired rounds need as many times on each side, got {len(numerator)} and "
            f"{len(denominator)}: time both sides in every round"
        )
    if any(d <= 0 for d in denominator):
        raise ValueError(f"times must be positive, got {list(denominator)}")
    return Ratio.of([a / b for a, b in zip(numerator, denominator)])


@dataclass(frozen=True)
class Target:
    """A speed target of the book: ``what`` compared ``op`` ``value``, where it is measured."""

    what: str
    op: str  # "<=": at most, ">=": at least
    value: float
    where: str

    def __post_init__(self):
        check_choice(self.op, "op", ("<=", ">="))

    def met_by(self, x: float) -> bool:
        return x <= self.value if self.op == "<=" else x >= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


# The book's speed targets, the one table every benchmark and chapter reads (chapter 3 prints
# it, each benchmark's --help states its own). Each is measured as paired per-round ratios.
TARGETS: dict[str, Target] = {
    "allreduce": Target(
        "pipelined ring / dist.all_reduce, bus bandwidth, 16 and 64 MiB, 2 processes",
        ">=", 0.95, "bench allreduce, chapter 3",
    ),
    "loop": Target(
        "loop efficiency, batches resident on the device (cpu profile, its batch size)",
        ">=", 0.98, "bench loop, chapter 1",
    ),
    "split": Target(
        "foreach split step on 2 virtual CPU devices / one-device step (ci profile)",
        "<=", 1.10, "bench split, chapter 2",
    ),
    "ddp": Target(
        "DDP step / no-communication step, 2 processes (the profile's model and batch)",
        "<=", 1.10, "bench ddp, chapter 5",
    ),
    "internals": Target(
        "BucketedDDP step / torch DDP step, 2 processes",
        "<=", 1.0, "bench internals, chapter 6",
    ),
    "sharding": Target(
        "hand-written ZeRO-3 step / FSDP2 step, 2 processes",
        "<=", 1.25, "bench sharding, chapter 9",
    ),
    "baseline": Target(
        "GPU only: a ResNet-18 epoch with chapter 1's fast baseline / with d2l's loop",
        "<=", 0.6, "bench baseline, chapter 1",
    ),
}  # fmt: skip


def load_average() -> float:
    """The 1-minute load average (``nan`` where the OS reports none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return math.nan


def scheduler_times(tasks: str = "/proc/self/task") -> dict[str, tuple[int, int]] | None:
    """Per thread of this process, nanoseconds on a core and nanoseconds ready but waiting
    for one (Linux's ``schedstat``); ``None`` where the system does not report them."""
    times = {}
    try:
        for tid in os.listdir(tasks):
            with open(os.path.join(tasks, tid, "schedstat")) as f:
                ran, waited = f.read().split()[:2]
            times[tid] = int(ran), int(waited)
    except (OSError, ValueError):  # not Linux, or a kernel without schedstats
        return None
    return times


def cpu_share(before: dict | None, after: dict | None) -> float | None:
    """Of the time this process's threads were ready to run between two
    :func:`scheduler_times`, the share they ran: about 1 on a quiet machine, lower when
    other work held the cores. A sleeping thread (waiting for I/O, a lock or another rank)
    counts in neither. ``None`` if unmeasured or if no thread was ready."""
    if before is None or after is None:
        return None
    ran = waited = 0
    for tid, (r, w) in after.items():  # a thread that ended between the two is not counted
        r0, w0 = before.get(tid, (0, 0))  # one that started: counted from 0
        ran, waited = ran + r - r0, waited + w - w0
    return ran / (ran + waited) if ran + waited > 0 else None


@dataclass(frozen=True)
class Load:
    """The load average before and after a measurement that ran ``own`` busy processes."""

    before: float
    after: float
    cores: int
    own: int
    share: float | None = None  # measured in this process: its threads' cpu_share

    @property
    def busy(self) -> bool:
        if self.share is not None:  # the direct measure, where there is one
            return self.share < CPU_SHARE_QUIET
        spare = self.cores - 1
        return self.before > spare or self.after > spare + self.own

    def __str__(self) -> str:
        text = f"load average {self.before:.1f} before, {self.after:.1f} after ({self.cores} cores)"
        if self.share is None:
            return text
        return f"ready threads ran {self.share:.0%} of the time ({text})"


class LoadWatch:
    """``watch = LoadWatch(own)`` before a measurement, ``watch.done()`` after it.
    ``in_process=True``: the measurement runs in this process, whose :func:`cpu_share`
    then decides whether the machine was busy (the load average lags by a minute)."""

    def __init__(self, own: int = 1, in_process: bool = False):
        self.own = check_int(own, "own", 1)
        self.before = load_average()
        self.times = scheduler_times() if in_process else None

    def done(self) -> Load:
        share = cpu_share(self.times, scheduler_times()) if self.times is not None else None
        return Load(self.before, load_average(), cpu_cores(), self.own, share)


@dataclass(frozen=True)
class Verdict:
    """``word``: met, missed, below, above or noise; ``why``: the reason for noise."""

    word: str
    why: str = ""

    @property
    def noise(self) -> bool:
        return self.word == "noise"

    def __str__(self) -> str:
        return f"noise ({self.why}): re-run on a quiet machine" if self.noise else self.word


def judge(ratio: Ratio, against: Target | float, load: Load | None = None) -> Verdict:
    """The verdict on ``ratio`` against a target or a plain reference value (see the module)."""
    if not isinstance(against, Target):
        check_positive(against, "against", "a Target from TARGETS, or 1 for which side is faster")
    value = against.value if isinstance(against, Target) else float(against)
    if load is not None and load.busy:
        return Verdict("noise", f"busy machine, {load}")
    if ratio.rounds < 2:
        return Verdict("noise", "one round, no spread")
    if ratio.low <= value <= ratio.high:
        return Verdict("noise", f"rounds on both sides of {value:g}")
    if isinstance(against, Target):
        return Verdict("met" if against.met_by(ratio.median) else "missed")
    return Verdict("below" if ratio.median < value else "above")
