"""Chapter 8's exercise checker: does a run resumed from your snapshot continue the same run?

``check_resume(make, restore)`` takes functions with the arguments of the chapter's
``make_snapshot(net, optimizer, scheduler, *, epoch, position, step, config)`` and
``restore(snapshot, net, optimizer, scheduler) -> (epoch, position, step)``. For
a small model without dropout and the same model with dropout, it trains 8 steps
(SGD with momentum, a warm-up schedule) without stopping; then 4 steps, a snapshot
written to bytes and read back, a fresh process's state (another initialisation,
the random streams elsewhere), ``restore``, and the other 4 steps. The resumed
parameters must equal the uninterrupted ones bit for bit (exercise 3).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import torch
from torch import nn

from companion.elastic import make_snapshot, restore

from .verdicts import Verdicts, attempt

__all__ = ["check_resume"]

STEPS, BATCH = 8, 16


def _parts(dropout: float, seed: int):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    warm_up = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=4)
    return net, optimizer, warm_up


def _train(net, optimizer, scheduler, batches) -> None:
    for X, y in batches:
        nn.functional.cross_entropy(net(X), y).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _resumed(make: Callable, restore_fn: Callable, dropout: float, batches) -> torch.Tensor:
    """The parameters after 4 steps, a snapshot, a restart from it and 4 more steps."""
    half = STEPS // 2
    net, optimizer, scheduler = _parts(dropout, seed=0)
    torch.manual_seed(1)  # the run's random stream (dropout's masks)
    _train(net, optimizer, scheduler, batches[:half])
    snapshot = make(
        net,
        optimizer,
        scheduler,
        epoch=0,
        position=half * BATCH,
        step=half,
        config={"lr": 0.1, "batch": BATCH},
    )
    buffer = io.BytesIO()
    torch.save(snapshot, buffer)
    net, optimizer, scheduler = _parts(dropout, seed=123)  # a new process: other weights,
    torch.rand(1000)  # its random streams elsewhere
    where = restore_fn(
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=False), net, optimizer, scheduler
    )
    if not isinstance(where, tuple) or tuple(where) != (0, half * BATCH, half):
        raise ValueError(
            f"restore returned {where}, not (epoch, position, step) = (0, {half * BATCH}, {half})"
        )
    _train(net, optimizer, scheduler, batches[half:])
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def check_resume(
    make: Callable = make_snapshot, restore_fn: Callable = restore, quiet: bool = False
) -> Verdicts:
    """Your ``make`` and ``restore``: the resumed run against the uninterrupted one."""
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(BATCH, 8, generator=g), torch.randint(0, 3, (BATCH,), generator=g))
        for _ in range(STEPS)
    ]
    verdicts = Verdicts(
        f"{getattr(make, '__name__', 'make')} and "
        f"{getattr(restore_fn, '__name__', 'restore')}: {STEPS} steps against "
        f"{STEPS // 2}, a snapshot, a restart and {STEPS // 2} more",
        quiet,
    )
    for name, dropout in (("a model without dropout", 0.0), ("a model with dropout", 0.5)):
        net, optimizer, scheduler = _parts(dropout, seed=0)
        torch.manual_seed(1)
        _train(net, optimizer, scheduler, batches)
        whole = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
        got, problem = attempt(_resumed, make, restore_fn, dropout, batches)
        if not problem and not torch.equal(got, whole):
            problem = "the resumed run's parameters differ from the uninterrupted run's"
        verdicts.add(
            f"{name}, resumed run equal to the uninterrupted run bit for bit", not problem, problem
        )
    return verdicts
