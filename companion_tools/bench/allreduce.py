"""Chapter 3: bus bandwidth of the hand-written rings vs dist.all_reduce; naive vs ring.

Two processes (by default) all-reduce float32 tensors of 16 MB and more. Each
round runs every algorithm once, in turn (interleaved, who goes first
rotating); a round's time is the slowest rank's, and the median over rounds
is reported as bus bandwidth (nccl-tests convention: bytes / time * 2 (p - 1)
/ p). Each ratio of bus bandwidths is the median of the rounds' paired
ratios, with their range; the pipelined ring's is judged against the book's
target (``companion.core.noise.TARGETS``) at every size.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.distributed as dist

from companion.collectives.allreduce import allreduce_ring_pipelined
from companion.collectives.costmodel import Measurement, measure_allreduce
from companion.core.checks import positive_arg
from companion.core.devices import hardware_label
from companion.core.noise import Load, Ratio, paired_ratio
from companion.core.training import Timer
from companion.runtime.group import backend_for, rank_device
from companion.runtime.launcher import launch

from . import bench_parser, measure_and_report, verdict

ALGORITHMS = ("naive", "ring", "pipelined ring", "dist.all_reduce")
RINGS = ("ring", "pipelined ring")


def measure(
    world_size: int = 2, megabytes=(16, 64), repeats: int = 9
) -> dict[int, dict[str, Measurement]]:
    """Per size in bytes: each algorithm's :class:`~companion.collectives.costmodel.Measurement`."""
    if world_size < 2:
        raise ValueError(f"bandwidth needs at least 2 processes, got {world_size}")
    numels = [int(mb * 2**20) // 4 for mb in megabytes]
    found: dict[int, dict[str, Measurement]] = {}
    for m in measure_allreduce([world_size], numels, ALGORITHMS, repeats):
        found.setdefault(m.nbytes, {})[m.algorithm] = m
    return found


SEGMENTS = tuple(2**k for k in range(12, 23, 2))  # 4,096 .. 4,194,304 elements


def segment_worker(
    rank: int, world_size: int, numel: int, segments=SEGMENTS, repeats: int = 5
) -> dict[int, float]:
    """Worker: median seconds of the pipelined ring per segment size, interleaved."""
    device = rank_device()
    x = torch.randn(numel, device=device)
    times = torch.zeros(len(segments), repeats + 1, dtype=torch.float64)
    for r in range(repeats + 1):  # round 0 warms up
        for i, segment in enumerate(segments):
            y = x.clone()
            dist.barrier()
            with Timer(device) as t:
                allreduce_ring_pipelined(y, segment=segment)
            times[i, r] = t.seconds
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # done when the slowest rank is
    return {s: statistics.median(times[i, 1:].tolist()) for i, s in enumerate(segments)}


def segment_sweep(world_size: int = 2, megabytes: float = 16, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one pipelined-ring all-reduce of ``megabytes``, per segment."""
    numel = int(megabytes * 2**20) // 4
    return launch(segment_worker, world_size, numel, SEGMENTS, repeats, timeout=600)[0]


def ratios(row: dict[str, Measurement]) -> dict[str, Ratio]:
    """Bus-bandwidth ratios, paired by round: each ring over ``dist.all_reduce``, naive
    over ring (a bandwidth ratio is the inverse ratio of the times)."""

    def faster(a: str, b: str) -> Ratio:
        return paired_ratio(row[b].rounds, row[a].rounds)

    found = {f"{ring} / dist.all_reduce": faster(ring, "dist.all_reduce") for ring in RINGS}
    found["naive / ring"] = faster("naive", "ring")
    return found


def report(results: dict[int, dict[str, Measurement]], load: Load | None = None) -> str:
    """Each size's bus bandwidths and ratios, and the pipelined ring's verdict."""
    lines = []
    for nbytes, row in sorted(results.items()):
        for name in ALGORITHMS:
            busbw = row[name].busbw / 1e9
            lines.append(f"{nbytes / 2**20:>7g} MB  {name:<16} bus bandwidth {busbw:7.3f} GB/s")
        for name, ratio in ratios(row).items():
            lines.append(f"{'':>11}{name} {ratio}")
        pipelined = ratios(row)["pipelined ring / dist.all_reduce"]
        lines.append(verdict("allreduce", pipelined, load, indent=" " * 11))
    return "\n".join(lines)


def _megabytes(text: str) -> float:
    """An argparse ``type``: a positive size in MB that holds at least one float32."""
    mb = positive_arg(float)(text)
    if mb * 2**20 < 4:
        raise argparse.ArgumentTypeError(
            f"--mb {mb} is less than one float32 (4 bytes): give at least 4e-06"
        )
    return mb


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("allreduce", __doc__, world_size=2, repeats=9)
    parser.add_argument(
        "--mb",
        dest="megabytes",
        metavar="MB",
        type=_megabytes,
        nargs="+",
        default=[16, 64],
        help="sizes",
    )

    def heading(options: dict, _) -> str:
        world_size = options["world_size"]
        return (
            f"all-reduce benchmark: {world_size} processes ({backend_for(world_size)}), "
            f"float32\n{hardware_label()}; median of {options['repeats']} interleaved rounds"
        )

    return measure_and_report(parser, argv, measure, report, heading)
