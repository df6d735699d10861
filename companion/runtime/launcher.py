"""One launcher: run a function on N worker processes, each in a process group.

Used in: chapters 3, 5, 6, 7 (chapter 3 introduces it).

``launch(fn, world_size, *args, **kwargs)`` returns ``[fn(0, world_size, *args,
**kwargs), fn(1, ...), ...]``, each call made in its own process after
``torch.distributed.init_process_group`` (gloo on the CPU, nccl when every
rank has its own GPU). Failures end in a clear exception and never leave a
process behind: a worker raises (:class:`WorkerError`, with its rank and
traceback), dies (:class:`WorkerDied`: ``os._exit``, a signal, the OOM
killer) or hangs (:class:`LaunchTimeout`); see :mod:`companion.runtime.supervise`.

Start-up: importing torch takes seconds, and a spawned process pays that
again. Workers are therefore forked from a *fork server*: a process started
once per Python session, which imports torch and ``companion`` and then only
forks. It never runs a tensor operation nor touches CUDA, so forking it is
safe, unlike forking a notebook kernel that may hold CUDA state or OpenMP
threads (``"fork"`` is refused). ``python -m companion_tools.bench launch``
measures both start methods. Functions travel by reference (module and
name), so they must be importable: not defined in a notebook cell.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any

import torch.distributed as dist

from ..core.allocator import keep_freed_memory
from ..core.checks import check_port, check_positive
from ..core.devices import gpu_count
from .group import MASTER_ADDR, backend_for, join_group
from .supervise import (
    STOP_GRACE,
    LaunchError,
    LaunchTimeout,
    WorkerDied,
    WorkerError,
    collect,
    stop,
    stop_helpers_when_kernel_exits,
)

__all__ = [
    "launch",
    "LaunchError",
    "WorkerError",
    "WorkerDied",
    "LaunchTimeout",
]

# What the fork server imports once, so that workers start warm. Optimizers
# import torch._dynamo on first use, which alone takes about a second. The
# module of the launched function is added when the server starts.
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "companion"]


def _exit_with_parent() -> None:
    """In a worker: end this process as soon as the launching process is gone."""
    wait([mp.parent_process().sentinel])
    os._exit(1)


def _worker(rank, world_size, payload, backend, port, timeout, env, conn) -> None:
    """What each worker process runs: join the group, call the function, report."""
    os.environ.clear()  # the launcher's environment now, not the fork server's
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR=MASTER_ADDR,
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    dist.set_debug_level_from_env()  # torch read TORCH_DISTRIBUTED_DEBUG at import, in the server
    keep_freed_memory()  # steady CPU step times (chapter 1)
    threading.Thread(target=_exit_with_parent, daemon=True).start()  # no orphans
    try:
        fn, args, kwargs = pickle.loads(payload)
        store = dist.TCPStore(MASTER_ADDR, port, world_size, False, timedelta(seconds=timeout))
        join_group(
            backend,
            rank,
            world_size,
            timeout,
            watch_parent=False,
            store=store,
            rank=rank,
            world_size=world_size,
        )
        dist.barrier()  # every rank is connected before fn starts
        message = pickle.dumps(("ok", fn(rank, world_size, *args, **kwargs)))
        if dist.is_initialized():
            dist.barrier()  # nobody disconnects while a peer may still be reading
            dist.destroy_process_group()
    except BaseException as err:  # every failure goes to the launcher
        report = ("error", type(err).__name__, str(err), traceback.format_exc())
        conn.send_bytes(pickle.dumps(report + (time.monotonic(),)))
        conn.close()
        # Stay alive, connections open, until the launcher stops us: the peers
        # block rather than fail too, and the launcher reports the real error.
        time.sleep(timeout)
        os._exit(1)
    conn.send_bytes(message)
    conn.close()


def _check_function(fn: Callable) -> None:
    if not callable(fn):
        raise TypeError(f"launch() needs a function, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", repr(fn))
    main = sys.modules.get("__main__")
    if getattr(fn, "__module__", None) == "__main__" and not hasattr(main, "__file__"):
        raise TypeError(
            f"{name} is defined in this notebook or interactive session (module "
            f"__main__), which worker processes cannot import. Move it into a "
            f"module (a .py file next to the notebook, or the companion package), "
            f"import it from there, and launch that."
        )
    if "<lambda>" in name or "<locals>" in name:
        raise TypeError(
            f"{name} is a lambda or a function defined inside another function; "
            f"worker processes cannot import it. Define it at the top of a module."
        )


def _context(start_method: str | None, fn: Callable):
    methods = mp.get_all_start_methods()
    method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
    if method == "fork":
        raise ValueError(
            "start_method='fork' is refused: forking a process that may hold CUDA "
            "state or OpenMP threads can hang or crash; use 'forkserver' or 'spawn'"
        )
    if method not in methods:
        raise ValueError(f"start method {method!r} is not available; use one of {methods}")
    ctx = mp.get_context(method)
    stop_helpers_when_kernel_exits()  # the helpers it starts: else a kernel's exit stalls
    if method == "forkserver":  # the preload list is used when the server starts
        _check_socket_room()
        module = getattr(fn, "__module__", None)
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        importable = module != "__main__" or (main_file and os.path.isfile(main_file))
        ctx.set_forkserver_preload(PRELOAD + ([module] if module and importable else []))
    return ctx


SUN_PATH_MAX = 103 if sys.platform == "darwin" else 107  # a Unix socket path's bytes, NUL not


def _check_socket_room() -> None:
    """``ValueError`` when the fork server's socket would not fit its temporary folder.

    The server listens on ``<temp>/pymp-XXXXXXXX/listener-XXXXXXXX``; a deeper ``TMPDIR``
    makes Python's own ``OSError: AF_UNIX path too long``, which names neither cause nor cure.
    """
    from multiprocessing import forkserver, process, util

    if hasattr(util, "_SUN_PATH_MAX"):
        return  # this Python falls back to a short folder by itself (gh-132124)
    if getattr(forkserver._forkserver, "_forkserver_address", None) is not None:
        return  # already listening
    base = process.current_process()._config.get("tempdir")
    base = base or os.path.join(tempfile.gettempdir(), "pymp-" + "x" * 8)
    path = os.path.join(base, "listener-" + "x" * 8)
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise ValueError(
            f"the temporary folder {tempfile.gettempdir()!r} is too deep for the fork "
            f"server's socket ({len(os.fsencode(path))} bytes in its path, at most "
            f"{SUN_PATH_MAX}); set TMPDIR to a short folder such as /tmp before Python "
            f"starts, or pass start_method='spawn'"
        )


def _check_launch(world_size: int, timeout: float, backend: str | None) -> str:
    """The backend to use; ``ValueError`` for a bad world size, timeout or backend."""
    if type(world_size) is not int or world_size < 1:  # True is an int, not a size
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    check_positive(timeout, "timeout", "give the seconds the run may take, e.g. 120")
    backend = backend or backend_for(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; use 'gloo' or 'nccl'")
    if backend == "nccl" and gpu_count() < world_size:
        raise ValueError(
            f"backend 'nccl' needs one GPU per rank: {world_size} ranks, "
            f"{gpu_count()} GPU(s); use backend='gloo' or fewer ranks"
        )
    return backend


def _open_store(port: int | None) -> dist.TCPStore:
    """The rendezvous store, held by the launcher on ``port`` (None: the OS picks)."""
    check_port(port)
    try:
        return dist.TCPStore(MASTER_ADDR, port or 0, None, True, wait_for_workers=False)
    except RuntimeError as err:
        if "EADDRINUSE" not in str(err) and "in use" not in str(err):
            raise
        raise LaunchError(
            f"port {port} is already in use on this machine; pass port=None to let "
            f"the OS choose a free one, or choose another port"
        ) from err


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args,
    backend: str | None = None,
    timeout: float = 120.0,
    port: int | None = None,
    start_method: str | None = None,
    **kwargs,
) -> list:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` processes.

    Returns the ``world_size`` return values in rank order. Before ``fn``
    runs, each worker has joined the default process group with ``backend``
    (default :func:`~companion.runtime.group.backend_for`: ``"gloo"`` on the CPU,
    ``"nccl"`` only when every rank has its own GPU, rank ``r`` on ``cuda:r``,
    see :func:`~companion.runtime.group.rank_device`), at ``MASTER_ADDR=127.0.0.1`` and ``MASTER_PORT``
    = ``port`` (default: a free port chosen by the OS), with ``RANK``,
    ``WORLD_SIZE`` and ``LOCAL_RANK`` set, ``GLOO_SOCKET_IFNAME`` set to the
    loopback interface under gloo, the launcher's current environment, and
    :func:`~companion.runtime.group.threads_per_worker` CPU threads.

    ``timeout`` (seconds) bounds each collective and the whole run, start-up
    included. ``fn``, its arguments and its return values are pickled
    (copied). ``backend``, ``timeout``, ``port`` and ``start_method``
    (``"forkserver"``, the default, or ``"spawn"``) are the launcher's own
    keywords, not passed on to ``fn``.

    Raises ``ValueError`` for a bad ``world_size``, ``timeout`` or backend;
    ``TypeError`` when the workers could not import ``fn``; :class:`LaunchError`
    when ``port`` is in use; :class:`WorkerError`, :class:`WorkerDied` or
    :class:`LaunchTimeout` when a run fails. Whatever happens, every worker
    has ended (stopped if need be, and joined) when ``launch`` returns.
    """
    backend = _check_launch(world_size, timeout, backend)
    _check_function(fn)
    try:
        payload = pickle.dumps((fn, args, kwargs))
    except Exception as err:
        raise TypeError(f"fn and its arguments must be picklable: {err}") from err
    ctx = _context(start_method, fn)
    store = _open_store(port)
    procs, readers, env = [], [], dict(os.environ)
    deadline = time.monotonic() + timeout
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            job = (rank, world_size, payload, backend, store.port, timeout, env, writer)
            procs.append(ctx.Process(target=_worker, args=job, name=f"rank{rank}"))
            procs[-1].start()
            writer.close()
            readers.append(reader)
        results = collect(procs, readers, deadline, timeout)
        stop(procs, wait_first=min(STOP_GRACE, max(0.0, deadline - time.monotonic())))
        return results
    finally:
        stop(procs)
        for reader in readers:
            reader.close()
        del store
