"""Mismatched collectives and hangs: what a short timeout and ``TORCH_DISTRIBUTED_DEBUG`` show.

Used in: the troubleshooting appendix.

Every rank must call the same collectives, in the same order, with tensors
of the same shape. When one does not, nothing checks it by default: the
ranks wait for messages that never come (a hang, until the process group's
timeout), exchange bytes of the wrong size (gloo aborts the process), or
compute garbage. ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` wraps every group
created afterwards in a checker that first compares what each rank is about
to call, and raises an error naming both collectives. torch reads the
variable when ``torch.distributed`` is imported: set it in the environment
that starts the processes (``TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ...``).

:func:`mismatched` is the worker: rank 0 all-reduces a tensor while rank 1
does something else (``kind``). It runs on a group of its own with a short
timeout, so every demonstration ends within seconds. :func:`diagnose_hang` runs
it under one debug level and returns what each rank saw.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..runtime.launcher import LaunchError, launch
from .environment import captured_stderr, temporary_env

__all__ = ["KINDS", "DEBUG_LEVELS", "mismatched", "diagnose_hang"]

KINDS = {
    "op": "rank 1 broadcasts while rank 0 all-reduces",
    "shape": "rank 1 all-reduces 5 numbers, rank 0 all-reduces 4",
    "skip": "rank 1 skips the all-reduce",
}
DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")


def mismatched(
    rank: int, world_size: int, kind: str, timeout: float = 2.0, log_dir: str | None = None
) -> dict:
    """Rank 0 all-reduces 4 ones; rank 1 does what ``kind`` says (see :data:`KINDS`).

    Runs on a new gloo group whose collectives time out after ``timeout``
    seconds. Returns ``{"rank", "error"`` (``"ExcType: message"`` or None),
    ``"result"`` (the tensor's values or None), ``"seconds"`` (spent in the
    collective), ``"stderr"`` (what torch logged, also written to
    ``log_dir/rank<r>.log`` when ``log_dir`` is given)}``.
    """
    _check(kind, timeout)
    # launch's workers come from a process that imported torch before the
    # variable was set: read it again, as a fresh process would at import.
    dist.set_debug_level_from_env()
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    x = torch.ones(5 if kind == "shape" and rank == 1 else 4)
    error, start = None, time.monotonic()
    path = os.path.join(log_dir, f"rank{rank}.log") if log_dir else None
    with captured_stderr(path) as log:
        try:
            if rank == 0 or kind == "shape":
                dist.all_reduce(x, group=group)
            elif kind == "op":
                dist.broadcast(x, src=1, group=group)
        except RuntimeError as err:
            error = f"{type(err).__name__}: {err}"
    seconds = time.monotonic() - start
    return {
        "rank": rank,
        "error": error,
        "result": None if error else x.tolist(),
        "seconds": seconds,
        "stderr": log.text,
    }


def _check(kind: str, timeout: float, debug: str = "OFF") -> None:
    if debug not in DEBUG_LEVELS:
        raise ValueError(f"debug must be one of {DEBUG_LEVELS}, got {debug!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


def diagnose_hang(kind: str, debug: str = "OFF", timeout: float = 2.0) -> list[dict] | str:
    """Run :func:`mismatched` on 2 ranks with ``TORCH_DISTRIBUTED_DEBUG=debug``.

    Returns each rank's dict, or, when a rank died (gloo aborts a process
    that receives a message of the wrong size), the launcher's error message
    followed by what each rank had written to stderr. Bounded: the launch
    itself times out after ``timeout + 30`` seconds.
    """
    _check(kind, timeout, debug)
    with temporary_env(TORCH_DISTRIBUTED_DEBUG=debug), tempfile.TemporaryDirectory() as logs:
        try:
            return launch(mismatched, 2, kind, timeout, logs, timeout=timeout + 30)
        except LaunchError as err:
            report = [f"{type(err).__name__}: {err}"]
            for rank in range(2):
                path = os.path.join(logs, f"rank{rank}.log")
                text = Path(path).read_text().strip() if os.path.exists(path) else ""
                if text:
                    report.append(f"stderr of rank {rank}:\n{text}")
            return "\n\n".join(report)
