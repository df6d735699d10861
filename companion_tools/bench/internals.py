"""Chapter 6: the rebuilt DDPs vs torch's DDP, and a bucket-size sweep vs the alpha-beta model.

Every rank times training steps of each variant (torch's DDP; BucketedDDP,
bucketed and overlapped; HookedDDP, one all-reduce per tensor from its hook;
NaiveDDP, all-reduces after backward; no communication) in interleaved
rounds within one run (who goes first rotates), phase by phase (forward,
backward, finish, optimizer). A round's time is the slowest rank's; medians
over rounds are printed with their ratios to torch's DDP, and BucketedDDP's
paired per-round ratio to torch's DDP is judged against the book's target. Then, on a deeper model, BucketedDDP and torch's
DDP at each bucket cap, against chapter 3's alpha-beta model fitted to
all-reduces timed in the same run.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn import functional as F

from companion.collectives.costmodel import fit_link, time_allreduce
from companion.core.checks import positive_arg
from companion.core.devices import synchronize
from companion.core.noise import Load, paired_ratio, rotated
from companion.core.training import set_seed
from companion.internals.sweep import bucket_sizes, get_bench_model, predict_step
from companion.internals.training import wrap
from companion.runtime.group import rank_device

from . import LAUNCHED, bench_parser, launch_bench, measure_and_report, verdict

METHODS = ("torch DDP", "BucketedDDP", "HookedDDP", "NaiveDDP", "no communication")
PHASES = ("forward", "backward", "finish", "optimizer")
CAPS = (0.1, 1.0, 5.0, 25.0, 100.0)


def _build(name: str, model: str, cap: float, device):
    set_seed(0)
    net = get_bench_model(model).to(device)
    if name in ("NaiveDDP", "HookedDDP", "BucketedDDP"):  # wait in finish(), a phase of its own
        net = wrap(net, name, cap, finish_in_backward=False)
    elif name == "torch DDP":
        net = wrap(net, name, cap)
    return net, torch.optim.SGD(net.parameters(), lr=0.01)


def _step(net, opt, X, y, device) -> list[float]:
    """One training step; the seconds of each phase."""
    marks = [time.perf_counter()]
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(net(X), y)
    for phase in (loss.backward, getattr(net, "finish", lambda: None), opt.step, lambda: None):
        synchronize(device)
        marks.append(time.perf_counter())
        phase()
    return [b - a for a, b in zip(marks, marks[1:])]


def _time(nets: dict, X, y, rounds: int, steps: int, device) -> torch.Tensor:
    """``[rounds, len(nets), phases + 1]``: per step, each phase and the whole, slowest rank."""
    for net, opt in nets.values():  # warm-up, untimed (torch's DDP rebuilds buckets)
        for _ in range(3):
            _step(net, opt, X, y, device)
    times = torch.zeros(rounds, len(nets), len(PHASES) + 1, dtype=torch.float64)
    pairs = list(enumerate(nets.values()))
    for r in range(rounds):
        for m, (net, opt) in rotated(pairs, r):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                times[r, m, :-1] += torch.tensor(_step(net, opt, X, y, device)) / steps
            times[r, m, -1] = (time.perf_counter() - start) / steps
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step waits for the slowest rank
    return times.cpu()


def _medians(times: torch.Tensor, names) -> dict:
    return {n: times[:, m].median(dim=0).values.tolist() for m, n in enumerate(names)}


def bench_worker(rank, world_size, model, batch, rounds, steps, sweep_model, caps) -> dict:
    """Worker: the variants on ``model``, then the bucket sweep on ``sweep_model``."""
    device = rank_device()
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    nets = {name: _build(name, model, 25.0, device) for name in METHODS}
    times = _time(nets, X, y, rounds, steps, device)
    seen = {"variants": _medians(times, METHODS)}
    seen["per_round"] = {n: times[:, m, -1].tolist() for m, n in enumerate(METHODS)}
    calls = 3 + rounds * steps
    seen["allreduces"] = {n: getattr(net, "allreduces", 0) / calls for n, (net, _) in nets.items()}
    seen["allreduces"]["torch DDP"] = _torch_buckets(model, 25.0, X, y, device)
    sweep = {
        (name, cap): _build(name, sweep_model, cap, device)
        for cap in caps
        for name in ("BucketedDDP", "torch DDP")
    }
    sweep["compute", 0] = _build("no communication", sweep_model, 0, device)
    medians = _medians(_time(sweep, X, y, rounds, steps, device), list(sweep))
    seen["sweep"] = {f"{n}|{c}": v for (n, c), v in medians.items()}
    found = time_allreduce(rank, world_size, [4**k for k in range(3, 12)], ["dist.all_reduce"], 3)
    seen["alpha"], seen["beta"] = fit_link(found)
    plain = get_bench_model(sweep_model)
    seen["buckets"] = {cap: bucket_sizes(plain, cap) for cap in caps}
    seen["torch buckets"] = {cap: _torch_buckets(sweep_model, cap, X, y, device) for cap in caps}
    return seen


def _torch_buckets(model: str, cap: float, X, y, device) -> int:
    """How many buckets torch's DDP all-reduces per step (after its rebuild), counted
    on a separate, untimed copy by a communication hook that wraps the default one."""
    net, opt = _build("torch DDP", model, cap, device)
    seen: list[int] = []

    def counting(state, bucket):
        seen.append(bucket.index())
        return allreduce_hook(None, bucket)

    net.register_comm_hook(None, counting)
    for _ in range(3):  # the buckets are rebuilt after the first step
        seen.clear()
        _step(net, opt, X, y, device)
    return len(seen)


def measure(
    world_size: int = 2,
    profile: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    rounds: int = 5,
    steps: int = 5,
    sweep_model: str = "mlp",
    caps=CAPS,
) -> dict:
    """Run :func:`bench_worker` on ``world_size`` processes; add the model's predictions."""
    seen = launch_bench(
        bench_worker,
        world_size,
        profile,
        sweep_model,
        list(caps),
        model=model,
        global_batch=global_batch,
        rounds=rounds,
        steps=steps,
        timeout=600,
    )
    fwd, bwd, _, opt, _ = seen["sweep"]["compute|0"]
    seen["predicted"] = {
        cap: fwd
        + opt
        + predict_step(seen["buckets"][cap], bwd, seen["alpha"], seen["beta"], world_size)
        for cap in caps
    }
    per_round = seen.pop("per_round")
    seen.update(caps=list(caps), sweep_model=sweep_model)
    seen["ratio"] = paired_ratio(per_round["BucketedDDP"], per_round["torch DDP"])
    return seen


def report(seen: dict, load: Load | None = None) -> str:
    """The variants' table, the target's verdict, where the time goes, and the sweep."""
    ddp = seen["variants"]["torch DDP"][-1]
    lines = [
        f"Rebuilt DDPs vs torch's DDP: {seen['world_size']} processes, model {seen['model']}, "
        f"global batch {seen['global_batch']}",
        f"{seen['hardware']}, profile '{seen['profile']}', fp32; median of {seen['rounds']} "
        f"interleaved rounds of {seen['steps']} steps",
        f"  {'variant':<18}{'ms/step':>9}{'vs torch DDP':>14}{'all-reduces/step':>18}",
    ]
    for name, phases in seen["variants"].items():
        n = seen["allreduces"][name]
        lines.append(f"  {name:<18}{phases[-1] * 1e3:>9.2f}{phases[-1] / ddp:>13.2f}x{n:>18.0f}")
    lines += [
        verdict("internals", seen["ratio"], load),
        "where the time goes (ms per step, phase by phase):",
        "  " + f"{'variant':<18}" + "".join(f"{p:>11}" for p in PHASES),
    ]
    for name, phases in seen["variants"].items():
        lines.append(f"  {name:<18}" + "".join(f"{s * 1e3:>11.2f}" for s in phases[:-1]))
    lines += [
        "  (torch's DDP waits for its buckets inside backward, in C++; the rebuilt ones pay "
        "Python hooks,",
        "  a copy into and out of each bucket, and wait in finish())",
        "",
        f"Bucket sweep on {seen['sweep_model']} ({sum(seen['buckets'][seen['caps'][0]]):,} bytes "
        "of gradients);",
        f"  alpha {seen['alpha'] * 1e6:.1f} us, beta {1 / max(seen['beta'], 1e-30) / 1e9:.2f}"
        " GB/s, fitted in this run",
        f"  {'cap MiB':>8}{'buckets':>9}{'BucketedDDP ms':>16}{'torch DDP ms':>14}"
        f"{'torch buckets':>15}{'model ms':>10}",
    ]
    for cap in seen["caps"]:
        ours, theirs = (
            seen["sweep"][f"BucketedDDP|{cap}"][-1],
            seen["sweep"][f"torch DDP|{cap}"][-1],
        )
        lines.append(
            f"  {cap:>8g}{len(seen['buckets'][cap]):>9}{ours * 1e3:>16.2f}"
            f"{theirs * 1e3:>14.2f}{seen['torch buckets'][cap]:>15}"
            f"{seen['predicted'][cap] * 1e3:>10.2f}"
        )
    best = min(seen["caps"], key=lambda c: seen["predicted"][c])
    measured = min(seen["caps"], key=lambda c: seen["sweep"][f"BucketedDDP|{c}"][-1])
    lines.append(f"best cap: model {best:g} MiB, measured (BucketedDDP) {measured:g} MiB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("internals", __doc__, **{**LAUNCHED, "steps": 5})
    parser.add_argument("--sweep-model", default="mlp", help="model of the bucket sweep (mlp)")
    parser.add_argument(
        "--caps",
        type=positive_arg(float),
        nargs="+",
        default=list(CAPS),
        help="bucket caps in MiB (0.1 1 5 25 100)",
    )
    return measure_and_report(parser, argv, measure, report)
