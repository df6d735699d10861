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

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from ..core.checks import check_choice
from ..runtime.group import backend_for, init_from_env, join_group

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
    if backend == "auto":
        backend = backend_for(local_world)
    local_rank = int(os.environ["LOCAL_RANK"])
    join_group(backend, local_rank, local_world, timeout, store=store, rank=rank, world_size=world)
    return True
