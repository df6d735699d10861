"""One run that measures every method's step time and bytes: ``bench compression``'s worker.

Used in: chapter 10 (``python -m companion.bench compression``).

Each method of :data:`~companion.slowlinks.training.METHODS` gets its own
copy of the same seeded model and one fixed batch per rank. After untimed
warm-up steps (DDP regroups its buckets after the first, PowerSGD averages
its first two whole), rounds of ``steps`` steps follow, the methods taking
turns in an order that rotates every round. A round's time per step is the
slowest rank's; its bytes are what the ledger saw this rank send.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn import functional as F

from ..core.models import get_model
from ..core.training import Timer, set_seed
from ..runtime.group import rank_device
from ..sharding.ledger import count_bytes
from .training import METHODS, communicate_less

__all__ = ["compression_worker"]


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
    """Worker: ``{"seconds": {method: [per round]}, "bytes": {method: per step}}``."""
    device = rank_device()
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
