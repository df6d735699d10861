"""Chapter 11: what the same bits cost, against chapter 5's DDP, on 1, 2 and 4 processes.

Every rank, a CPU process under gloo on any machine (chapter 11's pieces are
checked there only), times training steps of three copies of one model on one global
batch, in interleaved rounds within one run, who goes first rotating: torch's
DDP on the rank's share; chapter 11's pieces step, finished by recursive
halving and doubling; the same finished by gathering every rank's node sums.
A round's time is the slowest rank's. Per process count it prints the medians,
the pieces step's paired ratio to DDP judged against 1, and the bytes one rank
sends per step: the pieces' from the byte ledger of chapter 9, DDP's from the
ring all-reduce's formula (DDP's C++ reducer calls no Python collective the
ledger could count).
"""

from __future__ import annotations

import copy
import statistics
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from companion.core.devices import cpu_label
from companion.core.models import get_model
from companion.core.noise import Load, judge, paired_ratio
from companion.core.training import set_seed
from companion.runtime.group import ddp_device_ids, rank_device
from companion.runtime.launcher import launch
from companion.samebits import PieceStep, rank_pieces
from companion.samebits.tree import Layout
from companion.sharding import Ledger, count_bytes, ring_cost

from . import bench_parser, measure_and_report, run_settings
from .ddp import _step, _timed_rounds

METHODS = ("DDP", "pieces (halving)", "pieces (gather)")


def cost_worker(
    rank: int, world_size: int, model: str, global_batch: int, piece: int, rounds: int, steps: int
) -> dict:
    """Worker: per method, the slowest rank's seconds per step in each round, and the
    bytes this rank sends per step."""
    device = rank_device()
    set_seed(0)
    base = get_model(model).to(device)
    X = torch.randn(global_batch, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (global_batch,), generator=torch.Generator().manual_seed(2))
    share = global_batch // world_size
    mine = slice(rank * share, (rank + 1) * share)
    pieces = global_batch // piece
    lo, hi = rank_pieces(pieces, rank, world_size)
    block = (X[lo * piece : hi * piece].to(device), y[lo * piece : hi * piece].to(device))
    loader = SimpleNamespace(layout=Layout(global_batch, pieces, (lo, hi)), piece=piece)
    nets = {name: copy.deepcopy(base) for name in METHODS}
    nets["DDP"] = DDP(nets["DDP"], device_ids=ddp_device_ids(device))
    opts = {name: torch.optim.SGD(nets[name].parameters(), lr=0.01) for name in METHODS}
    loss_fn, share_X, share_y = nn.CrossEntropyLoss(), X[mine].to(device), y[mine].to(device)
    pieces_step = {name: PieceStep(loader, name.split("(")[1][:-1]) for name in METHODS[1:]}
    step = {"DDP": lambda: _step(nets["DDP"], opts["DDP"], share_X, share_y, None)}
    for name, one in pieces_step.items():
        step[name] = lambda n=name, s=one: s(nets[n], *block, loss_fn, opts[n])
    sent = {}
    for name in METHODS[1:]:
        ledger = Ledger(world_size)
        with count_bytes(ledger):
            step[name]()
        sent[name] = ledger.sent()
    nbytes = sum(p.numel() * p.element_size() for p in base.parameters())
    sent["DDP"] = ring_cost("all-reduce", nbytes, world_size)[1]
    times = _timed_rounds(step, rounds, steps, device)
    return {
        "seconds": {name: times[:, m].tolist() for m, name in enumerate(step)},
        "sent": sent,
        "threads": torch.get_num_threads(),
    }


def measure(
    world_sizes: tuple[int, ...] = (1, 2, 4),
    profile: str | None = None,
    *,
    model: str | None = None,
    global_batch: int | None = None,
    piece: int = 8,
    rounds: int = 6,
    steps: int = 5,
) -> dict:
    """Run :func:`cost_worker` on each process count of ``world_sizes``."""
    settings = run_settings(
        max(world_sizes), profile, model=model, global_batch=global_batch, rounds=rounds,
        steps=steps,
    )  # fmt: skip
    seen = dict(settings, piece=piece, runs={}, hardware=cpu_label())  # CPU processes only
    for n in world_sizes:
        seen["runs"][n] = launch(cost_worker, n, settings["model"], settings["global_batch"],
                                 piece, rounds, steps, backend="gloo", timeout=600)[0]  # fmt: skip
    return seen


def report(seen: dict, load: Load | None = None) -> str:
    """Per process count: milliseconds per step, the pieces' paired ratio to DDP with its
    verdict against 1, and the bytes one rank sends per step."""
    lines = [
        f"the same bits vs DDP: model {seen['model']}, global batch {seen['global_batch']}, "
        f"pieces of {seen['piece']}",
        f"{seen['hardware']}, profile '{seen['profile']}', fp32",
        f"median of {seen['rounds']} interleaved rounds of {seen['steps']} steps",
        f"  {'processes':<10}{'method':<18}{'ms/step':>9}{'vs DDP (rounds)':>24}{'bytes sent':>12}",
    ]
    for n, run in seen["runs"].items():
        ddp = run["seconds"]["DDP"]
        shown = METHODS if n > 1 else METHODS[:2]  # one process: no exchange, one step
        for name in shown:
            ms = statistics.median(run["seconds"][name]) * 1e3
            ratio = paired_ratio(run["seconds"][name], ddp)
            against = (
                "" if name == "DDP" else f"{ratio.median:.2f}x ({ratio.low:.2f}-{ratio.high:.2f})"
            )
            label = name if n > 1 else name.split()[0]
            lines.append(f"  {n:<10}{label:<18}{ms:>9.2f}{against:>24}{run['sent'][name]:>12,.0f}")
        for name in shown[1:]:
            verdict = judge(paired_ratio(run["seconds"][name], ddp), 1.0, load)
            lines.append(f"    {name if n > 1 else 'pieces'} against DDP: {verdict}")
    threads = ", ".join(f"{n}: {run['threads']}" for n, run in seen["runs"].items())
    lines += [
        f"threads per process (processes: threads) for DDP {threads}; the pieces compute at 1",
        "verdicts: 'above' = slower than DDP in every round, 'below' = faster in every round",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("samebits", __doc__, profile=None, model=None, global_batch=None,
                          rounds=6, steps=5)  # fmt: skip
    parser.add_argument("--piece", type=int, default=8, help="samples per piece")
    return measure_and_report(parser, argv, measure, report)
