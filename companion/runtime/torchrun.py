"""Running torchrun from Python: from a notebook cell or a test, output returned.

Used in: chapter 5.

:func:`run_torchrun` runs ``torchrun --standalone --nproc-per-node=N -m
companion.ddp [options]`` (see :mod:`companion.ddp.cli`) as a subprocess with
a timeout, and returns what it printed. On a timeout it stops torchrun *and*
its workers: torchrun starts each worker in a session of its own, so
stopping torchrun's process group alone would leave them running.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..core.checks import check_int, check_positive
from .group import threads_per_worker
from .supervise import STOP_GRACE

__all__ = ["torchrun_command", "TorchrunResult", "run_torchrun", "leave_now"]


def torchrun_command(
    nproc: int,
    args: Sequence[str] = (),
    module: str = "companion.ddp",
    flags: Sequence[str] = (),
) -> list[str]:
    """``torchrun --standalone --nproc-per-node=nproc [flags...] -m module args...`` as a list."""
    nproc = check_int(nproc, "nproc")
    head = ["torchrun", "--standalone", f"--nproc-per-node={nproc}", *flags, "-m", module]
    return head + [str(a) for a in args]


@dataclass
class TorchrunResult:
    """What a torchrun run printed, and how it ended."""

    command: str  # the command, as one would type it
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> TorchrunResult:
        """Raise ``RuntimeError`` with the output's tail unless the run succeeded."""
        if self.returncode != 0:
            raise RuntimeError(
                f"{self.command} exited with code {self.returncode}:\n{self.stderr[-3000:]}"
            )
        return self


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop_tree(proc: subprocess.Popen) -> None:
    """Stop torchrun and its workers: SIGTERM, a grace period, then SIGKILL.

    The workers run in sessions of their own, so they are found as
    descendants of torchrun (before anything is signalled, from ``/proc``
    on Linux) and signalled one by one. Without ``/proc`` only torchrun is
    signalled; on SIGTERM it stops its workers itself, and each worker also
    exits when it sees its parent gone (see ``companion.ddp.cli``).
    """
    pids = [proc.pid] + _descendants(proc.pid)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(_alive(p, proc) for p in pids):
        time.sleep(0.1)
    _signal_all([p for p in pids if _alive(p, proc)], signal.SIGKILL)
    proc.wait()


def _alive(pid: int, proc: subprocess.Popen) -> bool:
    if pid == proc.pid:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def run_torchrun(
    nproc: int,
    args: Sequence[str] = (),
    *,
    module: str = "companion.ddp",
    timeout: float = 300.0,
    env: dict[str, str] | None = None,
) -> TorchrunResult:
    """Run :func:`torchrun_command` as a subprocess; its output once it has ended.

    It runs ``python -m torch.distributed.run`` (what the ``torchrun`` command
    is) with this Python, and sets ``OMP_NUM_THREADS`` to the cores per
    process (otherwise torchrun sets 1 and prints a warning). After
    ``timeout`` seconds, torchrun and all its workers are stopped and
    ``TimeoutError`` is raised with what they had printed.
    """
    check_positive(timeout, "timeout", "give the seconds torchrun may run")
    command = torchrun_command(nproc, args, module)
    argv = [sys.executable, "-m", "torch.distributed.run", *command[1:]]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads_per_worker(nproc))}
    environment.update(env or {})
    with private_tmpdir(environment):
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_tree(proc)
            stdout, stderr = proc.communicate()
            raise TimeoutError(
                f"{shlex.join(command)} did not finish within {timeout:g} s; it and its "
                f"workers were stopped. Its last output:\n{stdout[-1500:]}{stderr[-1500:]}"
            ) from None
    return TorchrunResult(shlex.join(command), proc.returncode, stdout, stderr)


@contextmanager
def private_tmpdir(env: dict[str, str]) -> Iterator[str]:
    """Point ``env``'s ``TMPDIR`` at a new folder, removed with its contents on exit.

    torchrun keeps its workers' logs in a ``torchelastic_*`` folder of the
    temporary directory and never removes it; a run's own folder goes with it.
    """
    with tempfile.TemporaryDirectory(prefix="torchrun-") as tmp:
        env["TMPDIR"] = tmp
        yield tmp


def leave_now(code: int) -> NoReturn:
    """End this process with ``code`` at once, its output flushed: the last call of an entry
    point that torchrun starts, once its process group is destroyed.

    On torch 2.11 with Python 3.13 (Colab's), a worker whose work was done
    sometimes aborted while the interpreter shut down ("terminate called
    without an active exception", SIGABRT: 3 of about 250 runs of chapter 8's
    two-node job here). torchrun then counts the worker as failed, and the other
    nodes' agents wait out their 300-second exit barrier. ``os._exit`` skips
    that shutdown: nothing is left to do in it, files and the group being closed.
    """
    check_int(code, "code", 0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
