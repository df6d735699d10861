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

import torch
import torch.distributed as dist
from torch.nn import functional as F

from companion.core.models import get_model
from companion.core.noise import Load, judge, paired_ratio
from companion.core.training import Timer, set_seed
from companion.runtime.group import rank_device
from companion.sharding.ledger import count_bytes
from companion.slowlinks.training import METHODS, communicate_less

from . import LAUNCHED, bench_parser, launch_bench, measure_and_report


def compression_worker(
    rank: int,
    world_size: int,
    model: str,
    batch: int,
    rounds: int,
    steps: int,
    methods=METHODS,
    warmup: int = 3,
) -> dict:
    """Worker, one launch: ``{"seconds": {method: [per round]}, "bytes": {method: per step}}``."""
    device, methods = rank_device(), list(methods)  # names, in the table's order
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    runs = {}
    for method in methods:
        set_seed(0)
        runs[method] = communicate_less(method, get_model(model).to(device), lr=0.01)

    def step(method: str) -> None:
        model, optimizer = runs[method]
        F.cross_entropy(model(X), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for method in methods:
        for _ in range(warmup):
            step(method)
    times = torch.zeros(rounds, len(methods), dtype=torch.float64)
    sent = dict.fromkeys(methods, 0.0)
    for r in range(rounds):
        order = list(range(len(methods)))
        order = order[r % len(order) :] + order[: r % len(order)]  # who goes first rotates
        for m in order:
            dist.barrier()
            with count_bytes() as ledger, Timer(device) as timer:
                for _ in range(steps):
                    step(methods[m])
            times[r, m] = timer.seconds / steps
            sent[methods[m]] += ledger.sent() / (steps * rounds)
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step waits for the slowest rank
    return {
        "seconds": {name: times[:, m].tolist() for m, name in enumerate(methods)},
        "bytes": sent,
    }


def measure(
    world_size: int = 2,
    profile: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    rounds: int = 5,
    steps: int = 10,
) -> dict:
    """Run :func:`compression_worker`; its results and settings."""
    return launch_bench(
        compression_worker,
        world_size,
        profile,
        model=model,
        global_batch=global_batch,
        rounds=rounds,
        steps=steps,
    )


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
    parser = bench_parser("compression", __doc__, **LAUNCHED)
    return measure_and_report(parser, argv, measure, report)
