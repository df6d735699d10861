"""Chapter 3: start-up cost of launch(): workers forked from the fork server vs spawned.

A spawned worker starts a fresh Python and imports torch; a worker forked from
the fork server starts with torch and companion already imported. Each launch
runs a trivial worker (companion.collectives.tour.whoami) and is timed whole, from the
call until every result is back; the two start methods alternate, and the
medians are reported with their ratio. The first fork-server launch of a
session also starts the server (one import of torch), and is shown apart.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ..collectives.tour import whoami
from ..core.checks import RawDefaultsHelp, positive_arg
from ..core.devices import hardware_label
from ..runtime.launcher import launch


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m companion.bench launch",
        description=__doc__,
        formatter_class=RawDefaultsHelp,
    )
    parser.add_argument(
        "--world-size", type=positive_arg(int), default=2, help="workers"
    )
    parser.add_argument(
        "--repeats", type=positive_arg(int), default=3, help="launches per method"
    )
    args = parser.parse_args(argv)
    first = _timed(args.world_size, "forkserver")  # a fresh process: starts the server
    secs = measure(args.world_size, args.repeats)
    print(f"launch start-up: {args.world_size} workers, {hardware_label()}")
    print(f"  first launch (starts the fork server)  {first:7.3f} s")
    print(f"  forked from the fork server (median)   {secs['forkserver']:7.3f} s")
    print(f"  spawned, importing torch (median)      {secs['spawn']:7.3f} s")
    print(f"  spawn / forkserver: {secs['spawn'] / secs['forkserver']:.1f}x")
    return 0
