"""Chapter 9: hand-written ZeRO-3 against FSDP2 (step time) and every method's memory.

One launch of ``--world-size`` processes measures, on the same model and
batch: the median step time of ZeRO-3 by hand (without and with prefetch)
and of FSDP2, the methods taking turns after untimed warm-up steps, who goes
first rotating (a step's time is the slowest rank's; ZeRO-3 / FSDP2 is the
median of the rounds' paired ratios, with their range); and, for every method of
``companion.sharding.METHODS``, rank 0's bytes of parameters, gradients and
Adam state after a step, its peak sampled within the step (as each layer
starts and ends its forward, after each gradient, and as each collective is
called, with that call's own buffers), and the ZeRO formula. The ratios are
printed with the hardware, profile and precision that produced them, and judged
against the book's target
(``companion.core.noise.TARGETS``); ZeRO-3's state is checked against its
formula (within 10%: a byte count, not a timing).
"""

from __future__ import annotations

import statistics
from typing import Any

from companion.core.devices import hardware_label
from companion.core.noise import Load, paired_ratio
from companion.core.profiles import get_profile
from companion.runtime.launcher import launch
from companion.sharding.measure import state_worker, time_worker
from companion.sharding.memory import formula_bytes
from companion.sharding.training import METHODS

from . import bench_parser, measure_and_report, verdict

SIZES = {"ci": (96, 4, 32), "cpu": (480, 6, 64), "gpu": (1200, 8, 128)}  # width, depth, batch
SIZES["rehearsal"] = SIZES["ci"]  # the one-GPU path at ci sizes


def bench_worker(
    rank: int, world_size: int, width: int, depth: int, batch: int, steps: int, rounds: int
) -> dict[str, Any]:
    """Worker, one launch: step times and memory."""
    return {
        "seconds": time_worker(
            rank,
            world_size,
            ("ZeRO-3", "ZeRO-3 prefetch", "FSDP2"),
            width,
            depth,
            batch,
            steps,
            rounds,
        ),
        "state": state_worker(rank, world_size, METHODS, width, depth, "fp32", batch),
    }


def measure(
    world_size: int = 2, profile: str | None = None, rounds: int = 3, steps: int = 10
) -> dict:
    """Everything the report prints, measured in one launch."""
    profile = get_profile(profile)
    width, depth, batch = SIZES[profile.name]
    runs = launch(bench_worker, world_size, width, depth, batch, steps, rounds, timeout=900)
    seen = runs[0]
    seen.update(
        world_size=world_size,
        profile=profile.name,
        hardware=hardware_label(),
        model=f"divisible_mlp(width={width}, depth={depth})",
        batch=batch,
    )
    return seen


def report(seen: dict, load: Load | None = None) -> str:
    n, rounds = seen["world_size"], seen["seconds"]
    sec = {method: statistics.median(r) for method, r in rounds.items()}
    lines = [
        f"{seen['model']}, batch {seen['batch']} per rank, {n} processes, fp32,",
        f"  profile {seen['profile']}, {seen['hardware']}",
        "step time (median, slowest rank):",
    ]
    for method, s in sec.items():
        lines.append(f"  {method:<16} {s * 1e3:8.2f} ms  {s / sec['FSDP2']:5.2f}x FSDP2")
    lines.append(verdict("sharding", paired_ratio(rounds["ZeRO-3"], rounds["FSDP2"]), load))
    lines.append(
        "rank 0's state after a step (KiB): params, grads, optimizer = total | "
        "peak in step | formula"
    )
    for method, r in seen["state"].items():
        st, f = r["state"], formula_bytes(method, r["psi"], n)
        lines.append(
            f"  {method:<24} {st['params'] / 1024:8.1f} {st['grads'] / 1024:8.1f} "
            f"{st['optimizer'] / 1024:8.1f} = {st['total'] / 1024:8.1f} | "
            f"{r['peak'] / 1024:8.1f} | {f['total'] / 1024:8.1f} "
            f"({st['total'] / f['total']:.3f}x)"
        )
    z3 = seen["state"]["ZeRO-3"]
    off = abs(z3["state"]["total"] / formula_bytes("ZeRO-3", z3["psi"], n)["total"] - 1)
    lines.append(
        f"ZeRO-3 measured state vs formula: {off:.1%} off (target <= 10%: "
        f"{'met' if off <= 0.10 else 'missed'})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("sharding", __doc__, world_size=2, profile=None, rounds=3, steps=10)
    return measure_and_report(parser, argv, measure, report)
