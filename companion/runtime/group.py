"""Process groups: which backend, which device, how many threads, and joining one.

Used in: chapters 3 and 5 (every multi-process chapter after them).

One rule decides where a rank's tensors live, for every way of starting
processes (:func:`~companion.runtime.launcher.launch` from a notebook, or
``torchrun``):

* **nccl** when every process on this machine can have a GPU of its own:
  rank ``r`` (``LOCAL_RANK`` under torchrun) computes on ``cuda:r``;
* **gloo** otherwise, with every tensor on the CPU. This includes one GPU and
  two processes: nccl refuses two ranks on one GPU, and gloo cannot all-reduce
  CUDA tensors of two processes on one GPU any faster than on the CPU.

The rule depends only on the number of processes per machine and of GPUs,
so every rank reaches the same answer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ..core.checks import check_choice, check_int, check_positive
from ..core.devices import cpu_cores, gpu_count

__all__ = [
    "check_group",
    "MASTER_ADDR",
    "backend_for",
    "rank_device",
    "ddp_device_ids",
    "threads_per_worker",
    "join_group",
    "init_from_env",
]

MASTER_ADDR = "127.0.0.1"
LOOPBACK = "lo" if sys.platform == "linux" else "lo0"


def backend_for(local_world_size: int) -> str:
    """``"nccl"`` when each of ``local_world_size`` processes gets its own GPU, else ``"gloo"``."""
    if type(local_world_size) is not int or local_world_size < 1:
        raise ValueError(
            f"the number of processes must be an integer >= 1, got {local_world_size!r}"
        )
    nccl = dist.is_available() and dist.is_nccl_available()
    return "nccl" if nccl and gpu_count() >= local_world_size else "gloo"


def rank_device(local_rank: int | None = None, backend: str | None = None) -> torch.device:
    """The device a rank computes on: ``cuda:local_rank`` under nccl, the CPU otherwise.

    Inside a worker both arguments default to the current process group's
    (``LOCAL_RANK`` if set, else the rank).
    """
    _check_rank_device(local_rank, backend)
    if local_rank is None or backend is None:
        if not dist.is_initialized():
            raise RuntimeError(
                "no process group: call rank_device() inside a worker started by "
                "launch() or torchrun, or pass local_rank and backend"
            )
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        backend = dist.get_backend() if backend is None else backend
    return torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")


def check_group(name: str) -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group; else a ``RuntimeError`` naming ``name``."""
    if not dist.is_initialized():
        raise RuntimeError(
            f"{name} needs a process group: call it inside a worker started by "
            f"companion.runtime.launch (or torchrun)"
        )
    return dist.get_rank(), dist.get_world_size()


def ddp_device_ids(device: torch.device) -> list[torch.device] | None:
    """DDP's ``device_ids`` for a model on ``device``: ``[device]`` on a GPU, ``None`` on the CPU.

    ``None`` on the CPU also keeps ``nn.DataParallel`` from moving a CPU
    rank's model to a GPU that happens to be present.
    """
    if not isinstance(device, torch.device):
        raise TypeError(
            f"device must be a torch.device, got {device!r}: pass torch.device({device!r})"
        )
    return [device] if device.type == "cuda" else None


def _check_rank_device(local_rank: int | None, backend: str | None) -> None:
    if local_rank is not None:
        check_int(local_rank, "local_rank", 0)
    if backend is not None:
        check_choice(backend, "backend", ["gloo", "nccl"])


def threads_per_worker(world_size: int) -> int:
    """CPU threads for each of ``world_size`` workers: ``max(1, cores // world_size)``.

    Otherwise every worker would start one thread per core, and the workers
    would fight over the cores (oversubscription).
    """
    check_int(world_size, "world_size")
    return max(1, cpu_cores() // world_size)


def _exit_with_parent(parent: int) -> None:
    """End this process as soon as the process that started it is gone."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def join_group(
    backend: str,
    local_rank: int,
    local_world_size: int,
    timeout: float,
    watch_parent: bool = True,
    **init_kwargs,
) -> torch.device:
    """Set up this process and join the default process group; returns its device.

    Sets this process's threads (:func:`threads_per_worker`), the GPU under
    nccl, ``GLOO_SOCKET_IFNAME`` to the loopback under gloo when the group is
    on this host (unless already set), and (``watch_parent``) a watchdog that
    ends the process if its parent dies (no orphans). ``init_kwargs`` go to
    ``init_process_group`` (a ``store``, ``rank``, ``world_size``; none for
    torchrun's ``env://``).
    """
    check_positive(timeout, "timeout", "give the seconds a collective may wait")
    threads = threads_per_worker(local_world_size)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    device = rank_device(local_rank, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif os.environ.get("MASTER_ADDR", MASTER_ADDR) in (
        "localhost",
        MASTER_ADDR,
        "::1",
    ):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)
    if watch_parent:
        parent = os.getppid()
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=timeout),
        device_id=device if device.type == "cuda" else None,
        **init_kwargs,
    )
    return device


def init_from_env(backend: str = "auto", timeout: float = 300.0) -> bool:
    """Join the process group described by torchrun's environment variables.

    Returns ``False`` if a group already exists (e.g. under ``launch``).
    ``"auto"`` applies :func:`backend_for` to ``LOCAL_WORLD_SIZE``, the
    processes on this machine, so that every rank chooses the same backend.
    """
    _check_init_args(backend, timeout)
    if dist.is_initialized():
        return False
    _check_torchrun_env()
    local_world = _env_int("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])
    if backend == "auto":
        backend = backend_for(local_world)
    _check_backend_fits(backend, local_world)
    join_group(backend, _env_int("LOCAL_RANK"), local_world, timeout)
    return True


def _check_init_args(backend: str, timeout: float) -> None:
    check_choice(backend, "backend", ["auto", "gloo", "nccl"])
    check_positive(timeout, "timeout", "give the seconds a collective may wait")


def _check_torchrun_env() -> None:
    needed = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"]
    if missing := [name for name in needed if name not in os.environ]:
        raise RuntimeError(
            f"{', '.join(missing)} not set: start this with torchrun, e.g. torchrun "
            f"--standalone --nproc-per-node=2 -m companion.ddp (torchrun sets them), "
            f"or from Python with launch(ddp_worker, 2, data)"
        )


def _check_backend_fits(backend: str, local_world: int) -> None:
    if backend == "nccl" and gpu_count() < local_world:
        raise ValueError(
            f"backend nccl needs one GPU per process: {local_world} processes on this "
            f"machine, {gpu_count()} GPU(s); use --backend gloo or fewer processes"
        )


def _env_int(name: str, default: str | None = None) -> int:
    """The integer in environment variable ``name``; ``ValueError`` naming it if it is not one."""
    text = os.environ.get(name, default)
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"environment variable {name}={text!r} is not an integer: start this with "
            f"torchrun, which sets it, or set it to a number"
        ) from None
