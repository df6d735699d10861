"""Benchmarks: ``python -m companion.bench NAME [options]``.

Used in: every chapter that makes a speed claim. Each module of this package
is one benchmark with a ``main(argv)``; every ratio it prints is measured in
one run (both sides timed in the same process, interleaved), because
machines are too noisy for numbers taken at different times to be compared.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from ..core.checks import check_int
from ..core.devices import synchronize

__all__ = ["time_median", "available"]


def time_median(
    fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1, device=None
) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` untimed."""
    check_int(repeats, "repeats")
    check_int(warmup, "warmup", 0)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def available() -> list[str]:
    """Names of the benchmarks in this package."""
    import pkgutil

    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
    )
