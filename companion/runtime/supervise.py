"""Supervising worker processes: collect outcomes, report failures, leave none behind.

Used in: chapter 3, through :func:`companion.runtime.launcher.launch` (which re-exports
the exceptions below).

Each worker sends exactly one message through its pipe: ``("ok", result)``,
or ``("error", class name, message, traceback text, time)`` when its
function raised. A worker that ends without a message has died. The
launcher waits on every pipe and every process at once, so it notices the
first of these events, and it never waits past its deadline.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import sys
import time
import weakref
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import wait

__all__ = [
    "LaunchError",
    "WorkerError",
    "WorkerDied",
    "LaunchTimeout",
    "collect",
    "stop",
    "stop_helpers",
]

GRACE = 0.5  # seconds to collect further failures after the first one
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL


class LaunchError(RuntimeError):
    """A launch failed. ``pids``: the workers, all ended by the time it is raised."""

    def __init__(self, message: str, pids=(), **details):
        super().__init__(message)
        self.pids = list(pids)
        self.__dict__.update(details)


class WorkerError(LaunchError):
    """A worker raised: ``rank``, ``exc_type`` (class name), ``traceback`` (text)."""


class WorkerDied(LaunchError):
    """A worker ended without a result: ``rank``, ``exitcode`` (< 0: signal)."""


class LaunchTimeout(LaunchError, TimeoutError):
    """The run outlived its timeout: ``ranks`` had not finished (usually a hang)."""


def stop(procs: list, wait_first: float = 0.0) -> None:
    """End every worker: ``wait_first`` s to exit alone, SIGTERM, a grace, SIGKILL.

    Every started process is joined (reaped) before this returns; one that
    never started (its ``start()`` failed) is skipped.
    """
    procs = [p for p in procs if p.pid is not None]
    deadline = time.monotonic() + wait_first
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)


def stop_helpers() -> None:
    """End the fork server and multiprocessing's resource tracker, and reap both.

    The first launch starts them and later launches reuse them; they end by
    themselves when this process exits. A Jupyter kernel asked to shut down
    does not exit first: it signals every child process and waits until none
    is left, and a helper that has ended but is not reaped still counts (a
    zombie). It waited about 30 s, so Jupyter killed it, and the exit handlers
    that remove the chapters' work folders never ran. The launcher therefore
    calls this as soon as the kernel is told to exit; the next launch, if any,
    starts new helpers. It uses the private ``_stop`` that CPython's own tests
    use; where a Python lacks it, the helpers are left as they were. While
    workers run it does nothing: they hold the tracker's pipe, so it would
    wait for them.
    """
    if multiprocessing.active_children():  # a launch is under way
        return
    # The server first: it holds the tracker's pipe open, and the tracker
    # ends when the last holder of that pipe has closed it.
    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        try:
            getattr(helper, "_stop", lambda: None)()
        except (ChildProcessError, OSError):  # already ended and reaped
            pass


_WATCHED: weakref.WeakSet = weakref.WeakSet()


def stop_helpers_when_kernel_exits() -> None:
    """In IPython or a Jupyter kernel: call :func:`stop_helpers` when it is told to exit.

    IPython sets ``shell.exit_now`` on ``exit()`` and on a kernel's shutdown
    or restart request, before the kernel signals its children. Outside
    IPython this does nothing. Calling it again adds nothing.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or shell in _WATCHED:
        return
    shell.observe(lambda change: change["new"] and stop_helpers(), names="exit_now")
    _WATCHED.add(shell)


def collect(procs: list, readers: list, deadline: float, timeout: float) -> list:
    """Every worker's result, in rank order; or the most telling failure, raised.

    After the first failure the others get ``GRACE`` seconds to report
    too, so that the message can list every rank's fate.
    """
    pids = [p.pid for p in procs]
    results: list = [None] * len(procs)
    pending = set(range(len(procs)))
    errors: list[tuple] = []  # (time, rank, class name, message, traceback)
    deaths: list[tuple[int, int]] = []  # (rank, exit code)
    give_up = deadline
    while pending and time.monotonic() < give_up:
        waitables = [readers[r] for r in pending] + [procs[r].sentinel for r in pending]
        ready = wait(waitables, timeout=max(0.0, give_up - time.monotonic()))
        for r in sorted(pending):
            if readers[r] not in ready and procs[r].sentinel not in ready:
                continue
            data = _receive(readers[r])
            if data is None:  # the pipe is empty and closed: the worker is gone
                procs[r].join(1.0)
                if procs[r].exitcode is None:
                    continue
                deaths.append((r, procs[r].exitcode))
            else:
                try:
                    outcome = pickle.loads(data)
                except Exception as err:
                    raise LaunchError(
                        f"the result of rank {r} could not be unpickled here ({err}); "
                        f"return numbers, tensors or built-in types",
                        pids,
                    ) from err
                if outcome[0] == "ok":
                    results[r] = outcome[1]
                else:
                    errors.append((outcome[4], r, *outcome[1:4]))
            pending.discard(r)
        if (errors or deaths) and give_up == deadline:
            give_up = min(deadline, time.monotonic() + GRACE)
    if errors or deaths or pending:
        raise _failure(len(procs), pids, errors, deaths, sorted(pending), timeout)
    return results


def _receive(reader) -> bytes | None:
    if not reader.poll():
        return None
    try:
        return reader.recv_bytes()
    except (EOFError, OSError):
        return None


def _describe_exit(exitcode: int) -> str:
    if exitcode < 0:
        sig = -exitcode
        name = signal.Signals(sig).name if sig in signal.valid_signals() else sig
        return f"was killed by signal {name}"
    return f"exited with code {exitcode}"


def _abort_hint(exitcode: int) -> str:
    if exitcode != -signal.SIGABRT:
        return ""
    return (
        " A SIGABRT inside gloo often means that the ranks posted messages of different "
        "sizes (a tensor shaped differently on one rank): rerun with "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch's collectives and the hand-written "
        "all-reduces compare the ranks' tensors first."
    )


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks))


def _failure(world_size, pids, errors, deaths, pending, timeout) -> LaunchError:
    """The exception to raise, with what became of every other rank.

    A death comes first: it is never caused by another rank's error, since a
    rank that raises stays alive until it is stopped. Then the earliest error,
    then the timeout.
    """
    notes = [f"rank {r} {_describe_exit(code)}" for r, code in deaths]
    for _, r, kind, msg, _ in sorted(errors):
        notes.append(f"rank {r} raised {kind}: {msg.splitlines()[0][:160] if msg else ''}")
    if pending:
        were = "were" if len(pending) > 1 else "was"
        notes.append(f"{_ranks(pending)} had not finished and {were} stopped")
    also = ("\nAll workers: " + "; ".join(notes) + ".") if len(notes) > 1 else ""
    if deaths:
        r, code = deaths[0]
        return WorkerDied(
            f"worker rank {r} of {world_size} {_describe_exit(code)} before returning "
            f"a result (os._exit, a crash, the out-of-memory killer, or a script that "
            f'launches without an `if __name__ == "__main__":` guard?).{_abort_hint(code)}{also}',
            pids,
            rank=r,
            exitcode=code,
        )
    if errors:
        _, r, kind, msg, tb = sorted(errors)[0]
        return WorkerError(
            f"worker rank {r} of {world_size} raised {kind}: {msg}{also}\n\n"
            f"Traceback of rank {r}:\n{tb}",
            pids,
            rank=r,
            exc_type=kind,
            traceback=tb,
        )
    return LaunchTimeout(
        f"launch timed out after {timeout:g} s: {_ranks(pending)} of {world_size} "
        f"had not finished. A hang: ranks waiting for messages never sent, or "
        f"calling collectives in a different order. If the work is just slow, "
        f"pass a larger timeout=.",
        pids,
        ranks=pending,
    )
