"""Chapter 3: start-up cost of launch(): workers forked from the fork server vs spawned.

A spawned worker starts a fresh Python and imports torch; a worker forked from
the fork server starts with torch and companion already imported. Each launch
runs a trivial worker (companion.collectives.tour.whoami) and is timed whole, from the
call until every result is back; the two start methods alternate, and the
medians are reported with their ratio. The first fork-server launch of a
session also starts the server (one import of torch), and is shown apart.
"""

from __future__ import annotations

import statistics
import time

from ..collectives.tour import whoami
from ..core.devices import hardware_label
from ..runtime.launcher import launch
from . import bench_parser, measure_and_report


def _timed(world_size: int, start_method: str) -> float:
    start = time.perf_counter()
    launch(whoami, world_size, start_method=start_method, timeout=120)
    return time.perf_counter() - start


def measure(world_size: int = 2, repeats: int = 3) -> dict[str, float]:
    """Median seconds per launch for each start method, measured alternately."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    seen: dict[str, list[float]] = {"forkserver": [], "spawn": []}
    for _ in range(repeats):
        for method in seen:
            seen[method].append(_timed(world_size, method))
    return {method: statistics.median(times) for method, times in seen.items()}


def report(seen: tuple[float, dict[str, float]]) -> str:
    """The first launch, each start method's median and their ratio."""
    first, secs = seen
    return "\n".join([
        f"  first launch (starts the fork server)  {first:7.3f} s",
        f"  forked from the fork server (median)   {secs['forkserver']:7.3f} s",
        f"  spawned, importing torch (median)      {secs['spawn']:7.3f} s",
        f"  spawn / forkserver: {secs['spawn'] / secs['forkserver']:.1f}x",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("launch", __doc__, world_size=2, repeats=3)

    def first_then_measure(world_size: int, repeats: int):  # a fresh process: starts the server
        return _timed(world_size, "forkserver"), measure(world_size, repeats)

    return measure_and_report(parser, argv, first_then_measure, report,
                              lambda options, _: f"launch start-up: {options['world_size']} "
                                                 f"workers, {hardware_label()}")
