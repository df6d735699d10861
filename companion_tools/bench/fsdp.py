"""Where FSDP2's step goes, against the hand-written ZeRO-3 (chapter 9).

One launch of ``--world-size`` processes shards the same model both ways (Adam,
as ``bench sharding``) and times each phase of a step on every rank: forward
(its all-gathers included), backward (its reduce-scatters included) and the
optimizer's step, the methods taking turns. Then a few of FSDP2's steps run
under ``torch.profiler``, and the CPU time rank 0 spends inside FSDP2's own
regions (``FSDP::...``) is summed per step and per region, with the profiler's
own cost in it: its gathers and reduce-scatters (each with the copy into or out
of its flat buffer and the wait for the collective), the copies out of a gathered
buffer, its hooks. The optimizer row compares the same Adam on
FSDP2's ``DTensor`` shards and on ZeRO-3's plain ones.

    python -m companion_tools.bench fsdp
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.nn import functional as F

from companion.core.devices import hardware_label, synchronize
from companion.core.noise import Load, rotated
from companion.core.profiles import get_profile
from companion.core.training import set_seed
from companion.runtime.group import rank_device
from companion.runtime.launcher import launch
from companion.sharding.measure import _batch, divisible_mlp
from companion.sharding.training import shard

from . import bench_parser, measure_and_report
from .sharding import SIZES

PHASES = ("forward", "backward", "optimizer")
METHODS = ("ZeRO-3", "FSDP2")


def _step(model, optimizer, X, y, device) -> list[float]:
    """One step, the seconds of each phase."""
    marks = [time.perf_counter()]
    loss = F.cross_entropy(model(X), y)
    for work in (loss.backward, optimizer.step):
        synchronize(device)
        marks.append(time.perf_counter())
        work()
    synchronize(device)
    marks.append(time.perf_counter())
    optimizer.zero_grad()
    return [b - a for a, b in zip(marks, marks[1:])]


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ notes (CUDA device queries on a CPU) go to file descriptor 2."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _label(event) -> str:
    """``FSDP::all_gather (0.1)`` -> ``all_gather``: the region, without the unit's name."""
    return event.name.split(" (")[0].split(" for ")[0].removeprefix("FSDP::")


def _fsdp_regions(model, optimizer, X, y, device, steps: int) -> dict[str, float]:
    """CPU seconds per step inside FSDP2's ``FSDP::`` regions, by region, each without the
    regions nested in it (a gather inside a pre-forward hook counts as the gather's): together,
    the time inside the outermost regions. A collective's region holds its launch, the copy
    into or out of its flat buffer, and the wait for it."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _step(model, optimizer, X, y, device)
    seconds: dict[str, float] = {}
    for event in prof.events():
        if not event.name.startswith("FSDP::"):
            continue
        own = event.cpu_time_total / 1e6 / steps
        seconds[_label(event)] = seconds.get(_label(event), 0.0) + own
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("FSDP::"):
            parent = parent.cpu_parent
        if parent is not None:  # counted in the enclosing region too: taken out of it there
            seconds[_label(parent)] -= own
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


def phases_worker(
    rank: int, world_size: int, width: int, depth: int, batch: int, steps: int, rounds: int
) -> dict:
    """Worker: per method and phase, each round's median seconds (slowest rank), and rank 0's
    FSDP2 regions."""
    device = rank_device()
    X, y = _batch(batch, device)  # bench sharding's batch
    runs = {}
    for method in METHODS:
        set_seed(0)
        runs[method] = shard(method, divisible_mlp(width, depth).to(device), lr=1e-3)
    times = torch.zeros(rounds, steps, len(METHODS), len(PHASES), dtype=torch.float64)
    for r in range(rounds):
        for j, (model, opt) in rotated(list(enumerate(runs.values())), r):
            for i in range(-2, steps):  # two untimed steps each turn
                dist.barrier()
                seconds = _step(model, opt, X, y, device)
                if i >= 0:
                    times[r, i, j] = torch.tensor(seconds, dtype=torch.float64)
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    per_round = times.cpu().median(dim=1).values  # [rounds, methods, phases]
    regions = _fsdp_regions(*runs["FSDP2"], X, y, device, steps)
    return {
        "phases": {
            m: {p: per_round[:, j, k].tolist() for k, p in enumerate(PHASES)}
            for j, m in enumerate(METHODS)
        },
        "regions": regions,
    }


def measure(
    world_size: int = 2, profile: str | None = None, rounds: int = 3, steps: int = 10
) -> dict:
    """Run :func:`phases_worker` on the model and batch of ``bench sharding``; its results
    and settings."""
    if rounds < 1 or steps < 1:
        raise ValueError(f"rounds and steps must be >= 1, got {rounds}, {steps}")
    profile = get_profile(profile)
    width, depth, batch = SIZES[profile.name]
    seen = launch(phases_worker, world_size, width, depth, batch, steps, rounds, timeout=900)[0]
    return dict(
        seen,
        world_size=world_size,
        profile=profile.name,
        hardware=hardware_label(),
        model=f"divisible_mlp(width={width}, depth={depth})",
        batch=batch,
        rounds=rounds,
        steps=steps,
    )


def report(seen: dict, load: Load | None = None) -> str:
    """Each method's phases (median of the rounds), and FSDP2's own regions per step."""
    ms = {
        m: {p: sorted(r)[len(r) // 2] * 1e3 for p, r in phases.items()}
        for m, phases in seen["phases"].items()
    }
    lines = [
        f"{seen['model']}, batch {seen['batch']} per rank, {seen['world_size']} processes, fp32,",
        f"  profile {seen['profile']}, {seen['hardware']}; median of {seen['rounds']} "
        f"interleaved rounds of {seen['steps']} steps (slowest rank)",
        f"  {'ms per step':<12}" + "".join(f"{p:>11}" for p in PHASES) + f"{'step':>9}",
    ]
    for method, row in ms.items():
        cells = "".join(f"{row[p]:>11.2f}" for p in PHASES)
        lines.append(f"  {method:<12}{cells}{sum(row.values()):>9.2f}")
    extra = ", ".join(f"{p} {ms['FSDP2'][p] - ms['ZeRO-3'][p]:+.2f}" for p in PHASES)
    lines.append(f"  FSDP2 - ZeRO-3 (ms): {extra}")
    regions = seen["regions"]
    inside = sum(regions.values()) * 1e3
    lines += [
        f"FSDP2's own regions on rank 0: {inside:.2f} CPU ms per step (under torch.profiler),",
        f"  of its forward + backward {ms['FSDP2']['forward'] + ms['FSDP2']['backward']:.2f} ms;"
        " by region, each without the regions nested in it:",
    ]
    shown = {label: sec for label, sec in regions.items() if sec * 1e3 >= 0.05}
    for label, seconds in shown.items():
        lines.append(f"  {label:<30}{seconds * 1e3:8.2f}")
    if len(regions) > len(shown):
        lines.append(f"  ({len(regions) - len(shown)} more, each under 0.05 ms)")
    opt = ms["FSDP2"]["optimizer"] / ms["ZeRO-3"]["optimizer"]
    lines.append(f"the same Adam on FSDP2's DTensor shards / on ZeRO-3's plain shards: {opt:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("fsdp", __doc__, world_size=2, profile=None, rounds=3, steps=10)
    return measure_and_report(parser, argv, measure, report)
