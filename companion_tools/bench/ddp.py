"""Chapter 5: DDP's step time vs chapter 3's hand-written average_gradients loop.

Every rank times training steps (forward, backward, gradient averaging,
update) of four copies of one model, in interleaved rounds within one run:
DDP; chapter 3's average_gradients with the hand-written ring all-reduce;
the same with dist.all_reduce (gloo's C++ all-reduce); and no communication
at all (the compute alone), who goes first rotating. A round's time is that of
the slowest rank; the medians over rounds are printed with their ratios to
DDP, and DDP's paired per-round ratio to the step without communication is
judged against the book's target (``companion.core.noise.TARGETS``).
"""

from __future__ import annotations

import copy
import statistics
import textwrap

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from companion.collectives.partition import average_gradients
from companion.core.checks import check_int
from companion.core.models import get_model
from companion.core.noise import Load, paired_ratio, rotated
from companion.core.training import Timer, set_seed
from companion.runtime.group import ddp_device_ids, rank_device
from companion.runtime.launcher import launch

from . import LAUNCHED, bench_parser, launch_bench, measure_and_report, verdict

METHODS = (
    "DDP",
    "average_gradients (ring)",
    "average_gradients (dist.all_reduce)",
    "no communication",
)


def why(seen: dict) -> str:
    """What the timings say about DDP against the hand-written loop: each cause with the
    two timings that isolate it, judged by their paired per-round ratio (the one noise
    rule: a side is faster only if every round says so), not by what it usually shows."""
    ms = {name: f"{seen['median'][name] * 1e3:.2f}\u00a0ms" for name in METHODS}
    buckets = len(seen["bucket_bytes"])

    def compare(a: str, b: str, what: str) -> str:
        ratio = paired_ratio(seen["seconds"][a], seen["seconds"][b])
        if ratio.high < 1:
            return f"{what} faster here"
        if ratio.low > 1:
            return f"{what} slower here"
        return f"{what} neither faster nor slower here (rounds {ratio.low:.2f}-{ratio.high:.2f})"

    ddp, ring, gloo, alone = METHODS
    extra = (seen["median"][ddp] - seen["median"][alone]) * 1e3
    causes = [
        f"buckets: with gloo's all-reduce on both sides, DDP ({buckets or '?'} per step) took "
        f"{ms[ddp]} and one all-reduce per parameter tensor ({seen['tensors']}) {ms[gloo]}: "
        + compare(ddp, gloo, "the buckets were")
        + ";",
        f"C++ or Python: one all-reduce per tensor either way, gloo's C++ all-reduce took "
        f"{ms[gloo]} and chapter 3's Python ring {ms[ring]}: "
        + compare(gloo, ring, "C++ was")
        + ";",
        f"communication: DDP's step took {extra:.2f}\u00a0ms more than the same step "
        f"without any ({ms[alone]});",
        "overlap: "
        + (
            "one bucket, whose all-reduce starts when backward ends: nothing to hide it "
            "behind here (chapter 6 measures overlap)."
            if buckets == 1
            else "DDP can start a bucket's all-reduce while backward computes the other "
            "layers; chapter 6 measures how much it hides."
        ),
    ]
    wrapped = [
        textwrap.fill(c, 86, initial_indent="  * ", subsequent_indent="    ") for c in causes
    ]
    lines = ["Why DDP's step differs from the hand-written loop's, measured:", *wrapped]
    return "\n".join(lines).replace("\u00a0", " ")  # a number and its unit stay on one line


def _step(net, opt, X, y, averaging: str | None) -> None:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(X), y).backward()
    if averaging is not None:
        average_gradients(net, averaging)
    opt.step()


def bench_worker(
    rank: int, world_size: int, model: str, batch: int, rounds: int, steps: int
) -> dict:
    """Worker: per method, the slowest rank's seconds per step in each round."""
    device = rank_device()
    set_seed(0)
    base = get_model(model).to(device)
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    nets = {name: copy.deepcopy(base) for name in METHODS}
    nets["DDP"] = DDP(nets["DDP"], device_ids=ddp_device_ids(device))
    averaging = {"average_gradients (ring)": "ring"}
    averaging["average_gradients (dist.all_reduce)"] = "dist.all_reduce"
    opts = {name: torch.optim.SGD(nets[name].parameters(), lr=0.01) for name in nets}
    step = {
        name: (lambda n=name: _step(nets[n], opts[n], X, y, averaging.get(n))) for name in METHODS
    }
    times = _timed_rounds(step, rounds, steps, device)
    buckets = nets["DDP"]._get_ddp_logging_data().get("bucket_sizes", "")
    return {
        "seconds": {name: times[:, m].tolist() for m, name in enumerate(METHODS)},
        "bucket_bytes": [int(b) for b in str(buckets).split(",") if b.strip()],
        "tensors": len(list(base.parameters())),
        "parameters": sum(p.numel() for p in base.parameters()),
    }


def _timed_rounds(step: dict, rounds: int, steps: int, device: torch.device) -> torch.Tensor:
    """Three untimed calls of each step function, then in each round each one ``steps``
    times in turn, who goes first rotating: ``[rounds, len(step)]`` seconds per step."""
    for name in step:  # warm-up (DDP rebuilds its buckets after step 1)
        for _ in range(3):
            step[name]()
    times = torch.zeros(rounds, len(step), dtype=torch.float64)
    for r in range(rounds):
        for m, name in rotated(list(enumerate(step)), r):
            dist.barrier()
            with Timer(device) as t:
                for _ in range(steps):
                    step[name]()
            times[r, m] = t.seconds / steps
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step waits for the slowest rank
    return times.cpu()


def overhead_worker(
    rank: int, world_size: int, model: str, batches: list[int], rounds: int, steps: int
) -> dict[int, dict[str, list[float]]]:
    """Worker: for each per-rank batch, each round's seconds per step of DDP and of the
    same step without communication."""
    device, out = rank_device(), {}
    set_seed(0)
    base = get_model(model).to(device)
    for batch in batches:
        X = torch.randn(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        ddp = DDP(copy.deepcopy(base), device_ids=ddp_device_ids(device))
        nets = {"DDP": ddp, "no communication": copy.deepcopy(base)}
        opts = {name: torch.optim.SGD(net.parameters(), lr=0.01) for name, net in nets.items()}
        step = {n: (lambda n=n: _step(nets[n], opts[n], X, y, None)) for n in nets}
        times = _timed_rounds(step, rounds, steps, device)
        out[batch] = {name: times[:, m].tolist() for m, name in enumerate(step)}
    return out


def overhead_curve(
    world_size: int = 2,
    model: str = "lenet",
    batches: tuple[int, ...] = (8, 16, 32, 64, 128, 256),
    rounds: int = 3,
    steps: int = 10,
) -> list[dict]:
    """DDP's overhead against the step's size: per per-rank batch of ``batches``, the
    global batch, the median seconds of a step without communication, and DDP's step
    over it (the rounds' paired :class:`~companion.core.noise.Ratio`)."""
    check_int(world_size, "world_size", 2, "DDP's overhead needs two processes or more")
    for b in batches:
        check_int(b, "batch", 1, "a per-rank batch of images")
    seen = launch(overhead_worker, world_size, model, list(batches), rounds, steps, timeout=900)
    return [
        {
            "global batch": batch * world_size,
            "step": statistics.median(r["no communication"]),
            "ratio": paired_ratio(r["DDP"], r["no communication"]),
        }
        for batch, r in seen[0].items()
    ]


def measure(
    world_size: int = 2,
    profile: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    rounds: int = 5,
    steps: int = 10,
) -> dict:
    """Run :func:`bench_worker` on ``world_size`` processes; medians and settings."""
    seen = launch_bench(
        bench_worker,
        world_size,
        profile,
        model=model,
        global_batch=global_batch,
        rounds=rounds,
        steps=steps,
        timeout=600,
    )
    seen["median"] = {k: statistics.median(v) for k, v in seen["seconds"].items()}
    return seen


def report(seen: dict, load: Load | None = None) -> str:
    """The table of medians and ratios, the DDP buckets, and the explanation."""
    ddp = seen["median"]["DDP"]
    lines = [
        f"DDP vs average_gradients: {seen['world_size']} processes, model "
        f"{seen['model']}, global batch {seen['global_batch']}",
        f"{seen['hardware']}, profile '{seen['profile']}'",
        f"median of {seen['rounds']} interleaved rounds of {seen['steps']} steps",
        f"  {'method':<38}{'ms/step':>9}{'vs DDP':>9}",
    ]
    for name, sec in seen["median"].items():
        lines.append(f"  {name:<38}{sec * 1e3:>9.2f}{sec / ddp:>8.2f}x")
    rounds = seen["seconds"]
    lines.append(verdict("ddp", paired_ratio(rounds["DDP"], rounds["no communication"]), load))
    sizes = ", ".join(f"{b:,}" for b in seen["bucket_bytes"]) or "unknown"
    lines += [
        f"all-reduces per step: average_gradients {seen['tensors']} (one per parameter tensor),",
        f"  DDP {len(seen['bucket_bytes']) or '?'} (one per bucket; bucket bytes "
        f"{sizes} for {seen['parameters']:,} parameters)",
    ]
    return "\n".join([*lines, why(seen)])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("ddp", __doc__, **LAUNCHED)
    return measure_and_report(parser, argv, measure, report)
