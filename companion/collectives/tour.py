"""A tour of ``torch.distributed``: ranks, point-to-point, collectives, failures.

Used in: chapter 3. Every function here is a *worker*: run it with
:func:`companion.runtime.launcher.launch`, which calls it once per rank and hands back
what each rank returned. The workers return what they saw instead of
printing it, so the notebook can lay the ranks' views side by side.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..runtime.group import check_group, rank_device
from .allreduce import ALLREDUCES
from .trace import Step

__all__ = [
    "whoami",
    "point_to_point",
    "collectives",
    "ring_trace",
    "trace_allreduce",
    "TRACED",
    "faulty",
]

# The all-reduces that take a ``trace`` list.
TRACED = ("naive", "ring", "recursive doubling")


def whoami(rank: int, world_size: int) -> dict:
    """What a worker knows about itself: rank, backend, device, process, threads."""
    check_group("whoami")
    return {
        "rank": rank,
        "world_size": world_size,
        "group rank": dist.get_rank(),
        "backend": dist.get_backend(),
        "device": str(rank_device()),
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "MASTER_ADDR": os.environ["MASTER_ADDR"],
        "MASTER_PORT": os.environ["MASTER_PORT"],
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "(unset)"),
    }


def point_to_point(rank: int, world_size: int) -> dict:
    """A blocking ``send``/``recv``, then a ring shift with ``isend``/``irecv``.

    Blocking: ``send`` returns once the message is handed over, ``recv``
    once it has arrived, so two ranks that both ``send`` first would wait for
    each other forever. Non-blocking calls return a request at once; every
    rank posts its send to the right and its receive from the left, then
    waits on both: no ordering puzzle, and both transfers overlap.
    """
    device = rank_device()
    seen = {"send/recv": "needs 2 ranks"}
    if world_size >= 2:
        message = torch.tensor([10.0, 20.0, 30.0], device=device)
        if rank == 0:
            dist.send(message, dst=1)
            seen["send/recv"] = f"sent {message.tolist()} to rank 1"
        elif rank == 1:
            inbox = torch.zeros(3, device=device)
            dist.recv(inbox, src=0)
            seen["send/recv"] = f"received {inbox.tolist()} from rank 0"
        else:
            seen["send/recv"] = "not involved"
        mine = torch.tensor([float(rank)], device=device)
        inbox = torch.zeros(1, device=device)
        requests = [
            dist.isend(mine, dst=(rank + 1) % world_size),
            dist.irecv(inbox, src=(rank - 1) % world_size),
        ]
        for req in requests:
            req.wait()
        seen["isend/irecv ring shift"] = (
            f"sent {mine.item():g} right, received {inbox.item():g} from the left"
        )
    return seen


def collectives(rank: int, world_size: int) -> dict[str, list]:
    """The five collectives on small vectors; what this rank holds after each.

    Rank ``r`` starts with ``[10 r, 10 r + 1, ...]`` (``world_size`` numbers),
    so every number says where it came from.
    """
    device = rank_device()

    def start() -> torch.Tensor:
        x = torch.arange(world_size, dtype=torch.float32, device=device)
        return x + 10 * rank

    seen = {"start": start().tolist()}
    # broadcast: everyone gets rank 0's tensor
    x = start()
    dist.broadcast(x, src=0)
    seen["broadcast from 0"] = x.tolist()
    # reduce: rank 0 gets the sum; the other ranks' tensors are scratch space
    x = start()
    dist.reduce(x, dst=0)
    seen["reduce to 0"] = x.tolist() if rank == 0 else "(scratch)"
    # all_reduce: everyone gets the sum
    x = start()
    dist.all_reduce(x)
    seen["all_reduce"] = x.tolist()
    # all_gather: everyone gets every rank's tensor
    parts = [torch.empty(world_size, device=device) for _ in range(world_size)]
    dist.all_gather(parts, start())
    seen["all_gather"] = [p.tolist() for p in parts]
    # reduce_scatter: rank r gets the sum of everyone's element r
    out = torch.empty(1, device=device)
    dist.reduce_scatter(out, list(start().chunk(world_size)))
    seen["reduce_scatter"] = out.tolist()
    return seen


def ring_trace(rank: int, world_size: int) -> list[list[float]]:
    """The ring all-reduce step by step: this rank's tensor at the start and after each.

    Rank ``r`` starts with ``[1, 2, 3, ...] * 10**r``, so each digit of a sum
    tells which ranks have contributed to it: ``11`` is ranks 0 and 1, and
    ``111`` is complete on three ranks.
    """
    return [list(s.after) for s in trace_allreduce(rank, world_size, "ring")]


def trace_allreduce(rank: int, world_size: int, algorithm: str = "ring") -> list[Step]:
    """Worker: ``algorithm`` run on ``[1, 2, 3, ...] * 10**rank``, recorded step by step.

    Returns this rank's :class:`~companion.collectives.trace.Step` records,
    headed by its starting tensor (step ``-1``, phase ``"start"``).
    ``algorithm`` is one of :data:`TRACED`.
    """
    if algorithm not in TRACED:
        raise ValueError(f"cannot trace {algorithm!r}; choose from {list(TRACED)}")
    x = torch.arange(1, world_size + 1, dtype=torch.float64, device=rank_device())
    x *= 10.0**rank
    start = dict(sent_to=None, sent=None, received_from=None, received=None)
    steps = [Step(-1, "start", rank, **start, after=tuple(x.tolist()))]
    ALLREDUCES[algorithm](x, trace=steps)
    return steps


def _check_how(how: str) -> None:
    if how not in ("raise", "exit", "signal", "hang", "stubborn"):
        raise ValueError(f"unknown failure {how!r}")


def faulty(
    rank: int, world_size: int, how: str, on_rank: int = 1, pid_dir: str | None = None
) -> int:
    """A worker that fails on purpose on rank ``on_rank``; the others return their pid.

    ``how``: ``"raise"`` (a ``ValueError``), ``"exit"`` (``os._exit(3)``),
    ``"signal"`` (kills itself with SIGKILL), ``"hang"`` (sleeps), or
    ``"stubborn"`` (ignores SIGTERM, then sleeps: only SIGKILL ends it).
    With ``pid_dir`` every worker first writes its pid into a file there, so
    a caller can check afterwards that no process is left.
    """
    _check_how(how)
    if pid_dir is not None:
        (Path(pid_dir) / f"rank{rank}.pid").write_text(str(os.getpid()))
    dist.barrier()  # every pid is written before anyone fails
    if rank == on_rank:
        if how == "raise":
            raise ValueError(f"rank {rank} failed on purpose")
        if how == "exit":
            os._exit(3)
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    dist.all_reduce(torch.ones(1, device=rank_device()))
    return os.getpid()
