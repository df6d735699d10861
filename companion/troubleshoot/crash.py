"""A rank that crashes mid-training: what ``launch`` and ``torchrun`` report.

Used in: the troubleshooting appendix.

:func:`crash_at_step` is a worker for
:func:`~companion.runtime.launcher.launch`: a few steps of all-reduced
"training" in which one rank fails at a chosen step, by raising or by
dying. ``python -m companion.troubleshoot`` runs the same under ``torchrun``::

    torchrun --standalone --nproc-per-node=2 -m companion.troubleshoot --crash-rank 1

Its :func:`main` carries torch's ``record`` decorator, which writes the
failing rank's exception to an error file that torchrun reads, so that
torchrun's summary shows the exception and not only an exit code.
:func:`failures` reads that summary from torchrun's output.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ..core.checks import DefaultsHelp
from ..core.lines import say
from ..runtime.group import init_from_env

__all__ = ["HOWS", "crash_at_step", "failures", "main"]

HOWS = ("raise", "exit", "kill")


def crash_at_step(
    rank: int, world_size: int, crash_rank: int = 1, step: int = 2, how: str = "raise"
) -> int:
    """All-reduce a counter for ``step + 2`` steps; ``crash_rank`` fails at ``step``.

    ``how``: ``"raise"`` (a ``RuntimeError``), ``"exit"`` (``os._exit(3)``, as
    a process that ends without a Python error looks from outside) or
    ``"kill"`` (SIGKILL to itself, as the out-of-memory killer does).
    Returns the sum the ranks agreed on.
    """
    _check_crash(crash_rank, step, how)
    total = torch.zeros(1)
    for i in range(step + 2):
        if rank == crash_rank and i == step:
            if how == "raise":
                raise RuntimeError(f"rank {rank} crashed at step {i} (on purpose)")
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.ones(1)
        dist.all_reduce(x)
        total += x
    return int(total.item())


def _check_crash(crash_rank: int, step: int, how: str) -> None:
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    for name, value in (("crash_rank", crash_rank), ("step", step)):
        if type(value) is not int or value < 0:
            raise ValueError(f"crash_rank and step must be integers >= 0; {name} is {value!r}")


_BLOCK = re.compile(r"^\[\d+\]:\n(.*?)(?=^\[\d+\]:|^-{10,}|^={10,})", re.DOTALL | re.MULTILINE)
_FIELD = re.compile(r"^  (\w+)\s*: (.*)$", re.MULTILINE)


def _parse_block(block: str) -> dict:
    fields = {name: value.strip() for name, value in _FIELD.findall(block)}
    lines = [line.strip() for line in block.splitlines() if line.strip()]
    code = fields.get("exitcode", "").split()
    return {
        "rank": int(fields["rank"].split()[0]),
        "exitcode": int(code[0]) if code else None,
        "signal": code[-1].strip("()") if code and code[-1].startswith("(SIG") else None,
        "error": lines[-1] if "Traceback (most recent call last)" in block else None,
    }


def failures(output: str) -> dict:
    """torchrun's failure summary as data: ``{"root cause": {...}, "others": [...]}``.

    Each failure is a dict with ``rank``, ``exitcode``, ``signal`` (or None)
    and ``error`` (the traceback's last line when the worker's entry point
    carries ``record``, else None). Raises ``ValueError`` when ``output``
    holds no summary (the run did not fail, or this is not torchrun's output).
    """
    head, found, tail = output.rpartition("Root Cause (first observed failure):")
    if not found:
        last = "\n".join(output.strip().splitlines()[-12:]) or "(empty)"
        raise ValueError(
            "no 'Root Cause (first observed failure)' in this output: pass the "
            f"stderr of a torchrun run that failed; it ends:\n{last}"
        )
    listed = head.rpartition("Failures:")[2] + "\n" + "-" * 10
    others = [_parse_block(b) for b in _BLOCK.findall(listed)]
    return {"root cause": _parse_block(_BLOCK.findall(tail)[0]), "others": others}


@record
def main(argv: Sequence[str] | None = None) -> None:
    """Entry point under torchrun: join the group, run :func:`crash_at_step`."""
    parser = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc-per-node=N -m companion.troubleshoot",
        description="All-reduce a counter for a few steps; one rank fails on purpose.",
        formatter_class=DefaultsHelp,
    )
    parser.add_argument(
        "--crash-rank", type=int, default=1, help="the rank that fails (N or more: none fails)"
    )
    parser.add_argument("--step", type=int, default=2, help="the step (from 0) at which it fails")
    parser.add_argument(
        "--how",
        choices=HOWS,
        default="raise",
        help="raise an error, exit with code 3, or be killed (SIGKILL)",
    )
    args = parser.parse_args(argv)
    try:
        _check_crash(args.crash_rank, args.step, args.how)
    except ValueError as err:
        parser.error(re.sub(r"\bstep\b", "--step", str(err).replace("crash_rank", "--crash-rank")))
    init_from_env(backend="gloo", timeout=30.0)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = crash_at_step(rank, world_size, args.crash_rank, args.step, args.how)
    say(f"rank {rank}: total {total}")
    dist.destroy_process_group()
