"""Joining the process group again after torchrun restarted the workers.

Used in: chapter 8.

Under torchrun the workers find each other through a key-value store that
torchrun's agent keeps for the whole job (``TORCHELASTIC_USE_AGENT_STORE``).
A restarted worker group writes the same keys into that store as the group
it replaces; a new rank may then read an address that a dead rank published,
and fail to connect (gloo's "connectFullMesh failed"). :func:`join_elastic`
joins through a prefix that names the attempt (``TORCHELASTIC_RESTART_COUNT``),
so every attempt has keys of its own; otherwise it is
:func:`~companion.runtime.group.init_from_env`.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..core.checks import check_choice
from ..core.devices import gpu_count
from ..runtime.group import init_from_env, join_group

__all__ = ["attempt", "join_elastic"]


def attempt() -> int:
    """Which attempt this is: torchrun's restart count (0 the first time)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def join_elastic(backend: str = "auto", timeout: float = 300.0) -> bool:
    """Join the group of this attempt; ``False`` if a group exists already.

    Outside torchrun's restarts (no ``TORCHELASTIC_RESTART_COUNT``) this is
    :func:`~companion.runtime.group.init_from_env`, which also checks the
    environment and says what is missing. An ``OMP_NUM_THREADS`` that
    torchrun passes on is kept (it knows nothing of other agents on the
    machine; ``join_group`` would give each worker the cores of the machine).
    """
    check_choice(backend, "backend", ["auto", "gloo", "nccl"])
    threads = os.environ.get("OMP_NUM_THREADS")
    if dist.is_initialized() or "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        joined = init_from_env(backend, timeout)
    else:
        joined = _join_attempt(backend, timeout)
    if joined and threads:  # torchrun's OMP_NUM_THREADS wins: several agents may share a host
        os.environ["OMP_NUM_THREADS"] = threads
        torch.set_num_threads(int(threads))
    return joined


def _join_attempt(backend: str, timeout: float) -> bool:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=not agent_store and rank == 0,
        timeout=timedelta(seconds=timeout),
        multi_tenant=not agent_store,
    )
    store = dist.PrefixStore(f"/companion.elastic/attempt_{attempt()}", store)
    backend = _backend_for_machines(store, backend, rank, world, local_world)
    local_rank = int(os.environ["LOCAL_RANK"])
    join_group(backend, local_rank, local_world, timeout, store=store, rank=rank, world_size=world)
    return True


def _machine() -> str:
    """This computer: its name and the running kernel's boot id (processes, containers too,
    that share a kernel share its GPUs)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()} {boot.read_text().strip() if boot.exists() else ''}"


def _backend_for_machines(store, backend: str, rank: int, world: int, local_world: int) -> str:
    """``backend``, with ``"auto"`` decided alike on every rank: nccl where each machine's
    GPUs serve one agent's processes, one GPU each. torchrun's ``LOCAL_WORLD_SIZE`` counts
    one agent's processes, and several agents may share a machine (chapter 8's two "nodes"
    on one computer): each would take GPU 0, which nccl refuses."""
    gpus = gpu_count() if dist.is_nccl_available() else 0
    store.set(f"machine/{rank}", json.dumps([_machine(), local_world, gpus]))
    ranks = [json.loads(store.get(f"machine/{r}")) for r in range(world)]  # waits for each
    shared = any(sum(m == machine for m, _, _ in ranks) > n for machine, n, _ in ranks)
    if backend == "nccl" and shared:
        raise ValueError(
            "backend nccl: several torchrun agents share a machine, and each would give its "
            "first process GPU 0; use --backend gloo, or one agent per machine"
        )
    if backend != "auto":
        return backend
    fits = all(have >= n for _, n, have in ranks)  # a GPU for every process of each agent
    return "nccl" if fits and not shared else "gloo"
