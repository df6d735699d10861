"""Chapter 3: start-up cost of launch(): workers forked from the fork server vs spawned.

A spawned worker starts a fresh Python and imports torch; a worker forked from
the fork server starts with torch and companion already imported. Each launch
runs a trivial worker (companion.collectives.tour.whoami) and is timed whole, from the
call until every result is back; the two start methods take turns, who goes
first rotating, and the medians are reported with the paired ratio (median and
range over rounds) and its verdict against 1. The first fork-server launch of a
session also starts the server (one import of torch), and is shown apart.
"""

from __future__ import annotations

import statistics
import time

from companion.collectives.tour import whoami
from companion.core.devices import hardware_label
from companion.core.noise import Load, judge, paired_ratio, rotated
from companion.runtime.launcher import launch

from . import bench_parser, measure_and_report


def _timed(world_size: int, start_method: str) -> float:
    start = time.perf_counter()
    launch(whoami, world_size, start_method=start_method, timeout=120)
    return time.perf_counter() - start


def measure(world_size: int = 2, repeats: int = 3) -> dict[str, list[float]]:
    """Seconds per launch for each start method, one per round, the methods taking turns."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    seen: dict[str, list[float]] = {"forkserver": [], "spawn": []}
    for r in range(repeats):
        for method in rotated(list(seen), r):
            seen[method].append(_timed(world_size, method))
    return seen


def report(seen: tuple[float, dict[str, list[float]]], load: Load | None = None) -> str:
    """The first launch, each start method's median and their paired ratio."""
    first, secs = seen
    ratio = paired_ratio(secs["spawn"], secs["forkserver"])
    return "\n".join(
        [
            f"  first launch (starts the fork server)  {first:7.3f} s",
            f"  forked from the fork server (median)   {statistics.median(secs['forkserver']):7.3f} s",
            f"  spawned, importing torch (median)      {statistics.median(secs['spawn']):7.3f} s",
            f"  spawn / forkserver: {ratio:.1f}",
            f"  against 1: {judge(ratio, 1.0, load)}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("launch", __doc__, world_size=2, repeats=3)

    def first_then_measure(world_size: int, repeats: int):  # a fresh process: starts the server
        return _timed(world_size, "forkserver"), measure(world_size, repeats)

    return measure_and_report(
        parser,
        argv,
        first_then_measure,
        report,
        lambda options, _: f"launch start-up: {options['world_size']} workers, {hardware_label()}",
    )
