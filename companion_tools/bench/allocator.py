"""Chapter 1: one training step with glibc's malloc defaults and with freed memory kept.

The book's timed loops ask glibc's ``malloc`` to keep the memory torch frees
(:func:`~companion.core.allocator.keep_freed_memory`). The setting belongs to a
process, so each side runs in a new interpreter: every round starts one
process that leaves glibc's defaults and one that calls
``keep_freed_memory()`` first, the order alternating. Each process times, on the CPU, the
model the profile trains there (its last: LeNet) through
``companion.core.training.train_step`` on one batch of the profile's size
(random 28x28 images, after a warm-up) and counts the page faults of those
steps. The ratio is the kept side's step time over the defaults' in the same
round; no target, it explains chapter 1's timings on Linux.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

from companion.core.models import get_model
from companion.core.noise import Load, judge, paired_ratio, rotated
from companion.core.profiles import get_profile
from companion.core.training import set_seed, train_step

from . import bench_parser, measure_and_report, run_settings

SIDES = {"glibc defaults": False, "freed memory kept": True}


def steps_here(model: str, batch: int, steps: int, warmup: int = 10) -> dict[str, float]:
    """In this process: ms per step (median) and page faults per step of ``train_step``."""
    set_seed(0)
    net, loss = get_model(model), nn.CrossEntropyLoss()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    X, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))  # the chapters' size
    for _ in range(warmup):
        train_step(net, X, y, loss, opt)
    faults, seconds = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
    for _ in range(steps):
        start = time.perf_counter()
        train_step(net, X, y, loss, opt)
        seconds.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"ms": statistics.median(seconds) * 1e3, "faults": faults / steps}


def in_fresh_process(keep: bool, model: str, batch: int, steps: int) -> dict[str, float]:
    """:func:`steps_here` in a new interpreter, after ``keep_freed_memory()`` if ``keep``."""
    code = (
        f"import json; from {__name__} import steps_here as s; "
        + ("from companion.core import keep_freed_memory; keep_freed_memory(); " if keep else "")
        + f"print(json.dumps(s({model!r}, {batch}, {steps})))"
    )
    env = {**os.environ, "COMPANION_KEEP_FREED_MEMORY": "1"}  # the call decides, not the caller's
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"the timed process failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.splitlines()[-1])


def measure(profile: str | None = None, rounds: int = 5, steps: int = 40) -> dict:
    """Per side, one ``{"ms", "faults"}`` per round, each from a fresh process."""
    cpu_model = get_profile(profile).models[-1]  # glibc's memory is the CPU's: its model
    settings = run_settings(
        1, profile, model=cpu_model, global_batch=None, rounds=rounds, steps=steps
    )
    args = (settings["model"], settings["global_batch"], steps)
    seen: dict = {side: [] for side in SIDES}
    for r in range(rounds):
        for side in rotated(list(SIDES), r):
            seen[side].append(in_fresh_process(SIDES[side], *args))
    return {"settings": settings, "rounds": seen}


def report(seen: dict, load: Load | None = None) -> str:
    """Each side's step time and page faults per round, and the paired ratio with its verdict."""
    lines = []
    for side, runs in seen["rounds"].items():
        ms = ", ".join(f"{run['ms']:.2f}" for run in runs)
        faults = ", ".join(f"{run['faults']:,.0f}" for run in runs)
        lines += [f"  {side:<18} ms per step {ms}", f"  {'':<18} page faults per step {faults}"]
    ms = {side: [run["ms"] for run in runs] for side, runs in seen["rounds"].items()}
    ratio = paired_ratio(ms["freed memory kept"], ms["glibc defaults"])
    lines.append(f"  kept / defaults, step time: {ratio}\n  against 1: {judge(ratio, 1.0, load)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("allocator", __doc__, profile=None, rounds=5, steps=40)
    return measure_and_report(parser, argv, measure, report, _heading)


def _heading(options: dict, seen: dict) -> str:
    s = seen["settings"]
    return (
        f"allocator benchmark: profile '{s['profile']}', {s['hardware']}, model {s['model']},\n"
        f"  batch {s['global_batch']}, {s['rounds']} rounds of a fresh process per side, "
        f"{s['steps']} steps each"
    )
