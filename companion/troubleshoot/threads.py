"""Thread oversubscription: N workers that each use every core, measured.

Used in: the troubleshooting appendix.

PyTorch runs a CPU operation on ``torch.get_num_threads()`` threads, by
default one per core. Start N worker processes on one machine and each one
starts its own threads: N times as many threads as cores, which then take
turns on the cores (and OpenMP threads that wait for each other spin while
they wait). The fix is to give each worker its share,
``max(1, cores // N)``: :func:`~companion.runtime.group.threads_per_worker`,
which :func:`~companion.runtime.launcher.launch` applies and which
``torchrun`` approximates by setting ``OMP_NUM_THREADS=1`` when it is unset.

:func:`matmul_seconds` is the worker; :func:`oversubscription` times the
same work with both settings.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..core.devices import cpu_cores
from ..runtime.group import threads_per_worker
from ..runtime.launcher import launch

__all__ = ["matmul_seconds", "oversubscription"]


def matmul_seconds(rank: int, world_size: int, threads: int, size: int, repeats: int) -> dict:
    """With ``threads`` threads, time ``repeats`` products of two ``size`` x ``size`` matrices.

    All ranks start the timed part together (a barrier). Returns
    ``{"threads": torch.get_num_threads(), "seconds": ...}``.
    """
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(rank)
    A = torch.randn(size, size, generator=gen)
    B = torch.randn(size, size, generator=gen)
    A @ B  # warm-up: thread pool started, memory allocated
    dist.barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        C = A @ B
    seconds = time.perf_counter() - start
    assert C.shape == (size, size)
    return {"threads": torch.get_num_threads(), "seconds": seconds}


def oversubscription(
    world_size: int | None = None, size: int = 384, repeats: int = 200
) -> dict[str, dict]:
    """The same work on ``world_size`` workers (default: one per core), two ways.

    ``"every core"``: each worker uses as many threads as there are cores;
    ``"cores // N"``: each uses :func:`threads_per_worker`. For each, the
    threads per worker, the threads in all, and the slowest worker's seconds.
    """
    world_size = cpu_cores() if world_size is None else world_size
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if min(size, repeats) < 1:
        raise ValueError(f"size and repeats must be >= 1, got {size}, {repeats}")
    found = {}
    for label, threads in (
        ("every core", cpu_cores()),
        ("cores // N", threads_per_worker(world_size)),
    ):
        runs = launch(matmul_seconds, world_size, threads, size, repeats, backend="gloo")
        found[label] = {
            "threads per worker": runs[0]["threads"],
            "threads in all": sum(r["threads"] for r in runs),
            "seconds": max(r["seconds"] for r in runs),
        }
    return found
