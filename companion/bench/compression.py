"""Chapter 10: bytes sent and step time of every method against DDP, in one run.

One launch of ``--world-size`` processes trains the profile's model on one
fixed batch per rank with each method of ``companion.slowlinks.METHODS``:
DDP (its mean hook), the fp16 and bf16 hooks, PowerSGD, local SGD and
DiLoCo. After untimed warm-up steps, the methods take turns in rounds of
``--steps`` steps, who goes first rotating every round; a round's time per
step is the slowest rank's. Printed per method: the bytes a rank sends per
step (fixed by the method, the same on any machine) and the step time, both
against DDP, the time ratio as the median of the rounds' paired ratios with
the smallest and largest, and its verdict against 1 (below: faster than DDP). On a machine whose own link is fast (one host, loopback),
sending less saves little time: the time column measures this machine, and
chapter 10 projects the bytes onto slower links.
"""

from __future__ import annotations

import statistics

from ..core.batches import rank_batch_size
from ..core.noise import Load, judge, paired_ratio
from ..runtime.launcher import launch
from ..slowlinks.measure import compression_worker
from . import bench_parser, measure_and_report, run_settings


def measure(
    world_size: int = 2,
    profile: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    rounds: int = 5,
    steps: int = 10,
) -> dict:
    """Run :func:`~companion.slowlinks.measure.compression_worker`; its results and settings."""
    settings = run_settings(
        world_size, profile, model=model, global_batch=global_batch, rounds=rounds, steps=steps
    )
    batch = rank_batch_size(settings["global_batch"], world_size)
    seen = launch(
        compression_worker, world_size, settings["model"], batch, rounds, steps, timeout=900
    )[0]
    return {**seen, **settings}


def report(seen: dict, load: Load | None = None) -> str:
    """Bytes and step time per method against DDP (median over rounds, and their range),
    each time ratio judged against 1."""
    ddp_sec, ddp_bytes = seen["seconds"]["DDP"], seen["bytes"]["DDP"]
    lines = [
        f"every method vs DDP: {seen['world_size']} processes, model {seen['model']}, "
        f"global batch {seen['global_batch']}, fp32",
        f"{seen['hardware']}, profile '{seen['profile']}'; {seen['rounds']} interleaved "
        f"rounds of {seen['steps']} steps",
        f"  {'method':<14}{'bytes/step':>12}{'vs DDP':>8}{'ms/step':>9}  time vs DDP",
    ]
    for method, sec in seen["seconds"].items():
        sent, ratio = seen["bytes"][method], paired_ratio(sec, ddp_sec)
        verdict = "" if method == "DDP" else f", {judge(ratio, 1.0, load)}"
        lines.append(
            f"  {method:<14}{sent:>12,.0f}{sent / ddp_bytes:>8.3f}"
            f"{statistics.median(sec) * 1e3:>9.2f}  {ratio}{verdict}"
        )
    lines.append(
        f"local SGD and DiLoCo send only when the replicas meet (every H steps): their "
        f"bytes are those of the meetings within these {seen['rounds'] * seen['steps']} "
        f"timed steps"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(
        "compression",
        __doc__,
        world_size=2,
        profile=None,
        model=None,
        global_batch=None,
        rounds=5,
        steps=10,
    )
    return measure_and_report(parser, argv, measure, report)
