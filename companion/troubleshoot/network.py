"""Ports and network interfaces: the two ways a group fails before it starts.

Used in: the troubleshooting appendix.

Rank 0 (or the launcher) listens on ``MASTER_ADDR:MASTER_PORT`` for the
others. If something else already listens there (a previous run that did
not end, another user's job), creating the store fails with
``EADDRINUSE``: :func:`port_taken` holds a port the way such a process
does, :func:`store_error` shows torch's own message, and
:func:`~companion.runtime.launcher.launch` turns it into one that says what
to do. :func:`free_port` asks the OS for a free one.

gloo then opens connections between every pair of ranks on the interface
named by ``GLOO_SOCKET_IFNAME`` (by default, the one the host name resolves
to). :func:`interfaces` lists this machine's, and :func:`try_interface`
starts a group on a given one.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist

from ..collectives.tour import whoami
from ..runtime.group import MASTER_ADDR
from ..runtime.launcher import LaunchError, launch
from .environment import temporary_env

__all__ = ["free_port", "port_taken", "store_error", "interfaces", "try_interface"]


def free_port() -> int:
    """A TCP port on ``127.0.0.1`` that nothing listens on at the moment (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((MASTER_ADDR, 0))
        return s.getsockname()[1]


@contextmanager
def port_taken() -> Iterator[int]:
    """Inside the block, a port on ``127.0.0.1`` is held by a listening socket: yields it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((MASTER_ADDR, 0))
        s.listen()
        yield s.getsockname()[1]


def store_error(port: int) -> str | None:
    """Try to start a rendezvous store on ``port``: torch's error message, or None if it worked."""
    if type(port) is not int or not 0 < port < 65536:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    try:
        store = dist.TCPStore(MASTER_ADDR, port, 1, True, timedelta(seconds=5))
    except RuntimeError as err:
        return str(err)
    del store
    return None


def interfaces() -> list[str]:
    """The names of this machine's network interfaces (``lo`` is the loopback on Linux)."""
    return [name for _, name in socket.if_nameindex()]


def try_interface(name: str, timeout: float = 20.0) -> str:
    """Start a 2-rank gloo group with ``GLOO_SOCKET_IFNAME=name``.

    Returns the interface the workers used, or the kind of the launcher's
    error and the last line of the failing rank's traceback.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be an interface name such as 'lo', got {name!r}")
    with temporary_env(GLOO_SOCKET_IFNAME=name):
        try:
            seen = launch(whoami, 2, backend="gloo", timeout=timeout)
        except LaunchError as err:
            return f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}"
    return f"both ranks connected over {seen[0]['GLOO_SOCKET_IFNAME']}"
