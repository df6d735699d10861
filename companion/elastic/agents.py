"""Several torchrun agents on one machine, each standing for a node.

Used in: chapter 8.

A multi-node job runs one ``torchrun`` *agent* per node, all with the same
rendezvous endpoint and job id; the agents meet there, agree on the ranks
and start their workers. Nothing in that needs separate machines, so
:func:`run_agents` starts ``nodes`` agents here, each in a session of its
own, waits for all of them and returns what each printed; on a timeout it
stops every agent *and* its workers. ``--nnodes=MIN:MAX`` makes the job
elastic: when a node leaves, the others re-rendezvous and go on with fewer,
down to ``MIN``.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..core.checks import check_int, check_positive
from ..runtime.torchrun import TorchrunResult, _stop_tree, private_tmpdir, torchrun_command

__all__ = ["free_port", "standalone_command", "agent_command", "run_agents"]

# The last call: how long a round that has its minimum of nodes waits for more (30 s by default).
# Long enough for the second agent of a test to start, short enough for the restart after a
# node left.
RDZV_CONF = "last_call_timeout=10"


def free_port() -> int:
    """A TCP port that is free on this machine now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def standalone_command(nproc: int, args: Sequence[str] = (), max_restarts: int = 0) -> list[str]:
    """``torchrun --standalone`` (one node) restarting failed workers ``max_restarts`` times."""
    restarts = f"--max-restarts={check_int(max_restarts, 'max_restarts', 0)}"
    return torchrun_command(nproc, args, "companion.elastic", flags=[restarts])


def _check_counts(nproc: int, max_restarts: int) -> None:
    check_int(nproc, "nproc")
    check_int(max_restarts, "max_restarts", 0)


def agent_command(
    nnodes: str,
    nproc: int,
    endpoint: str,
    run_id: str,
    args: Sequence[str] = (),
    max_restarts: int = 0,
    rdzv_conf: str = RDZV_CONF,
) -> list[str]:
    """One node's ``torchrun`` for a c10d rendezvous at ``endpoint``; ``nnodes``: "N", "MIN:MAX"."""
    _check_counts(nproc, max_restarts)
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf={rdzv_conf}",
        "-m",
        "companion.elastic",
        *map(str, args),
    ]


def _wait_for_rendezvous(command: list[str], first: subprocess.Popen, deadline: float) -> None:
    """Wait until the first agent listens at the endpoint: then it hosts the rendezvous.

    Whichever agent binds the endpoint's port first hosts the rendezvous
    store, and if that agent left, the others would lose the rendezvous.
    """
    endpoints = [a.split("=", 1)[1] for a in command if a.startswith("--rdzv-endpoint=")]
    if not endpoints:
        return
    host, _, port = endpoints[0].rpartition(":")
    while time.monotonic() < deadline and first.poll() is None:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)


def run_agents(
    commands: Sequence[list[str]],
    *,
    timeout: float = 120.0,
) -> list[TorchrunResult]:
    """Run one agent per command (``agent_command``, ``standalone_command``) here; their outputs.

    Agents start in order, the others once the first listens at the rendezvous
    endpoint (so the first hosts it); the workers use the loopback interface.
    A crash at a known place is an option of the command (``--kill-after
    node:30``: that node disappears after step 30). Each agent
    writes to files of its own (a pipe read only after another agent ended
    could fill and stall it). After ``timeout`` seconds, every agent and its
    workers are stopped and ``TimeoutError`` raised with each one's last output.
    """
    check_positive(timeout, "timeout", "give the seconds the agents may run")
    base = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    with private_tmpdir(base) as tmp:
        procs, deadline = [], time.monotonic() + timeout
        logs = [
            (Path(tmp, f"agent{i}.out"), Path(tmp, f"agent{i}.err")) for i in range(len(commands))
        ]
        for i, (command, (out, err)) in enumerate(zip(commands, logs)):
            argv = [sys.executable, "-m", "torch.distributed.run", *command[1:]]
            with open(out, "w") as stdout, open(err, "w") as stderr:
                procs.append(
                    subprocess.Popen(
                        argv,
                        stdout=stdout,
                        stderr=stderr,
                        text=True,
                        env=base,
                        start_new_session=True,
                    )
                )
            if i == 0 and len(commands) > 1:
                _wait_for_rendezvous(command, procs[0], deadline)
        try:
            for proc in procs:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            ended = [f"exit {p.returncode}" if p.poll() is not None else "stopped" for p in procs]
            for proc in procs:
                if proc.poll() is None:
                    _stop_tree(proc)
            last = "".join(
                f"\nagent {i} ({how}):\n{_tail(out)}{_tail(err)}"
                for i, (how, (out, err)) in enumerate(zip(ended, logs))
            )
            raise TimeoutError(
                f"{len(commands)} agents did not finish within {timeout:g} s; they and their "
                f"workers were stopped. Their last output:{last}"
            ) from None
        outputs = [(out.read_text(), err.read_text()) for out, err in logs]
    return [
        TorchrunResult(shlex.join(c), p.returncode, out, err)
        for c, p, (out, err) in zip(commands, procs, outputs)
    ]


def _tail(path: Path, chars: int = 2500) -> str:
    return path.read_text()[-chars:]
