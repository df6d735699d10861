"""The launcher: results per rank, every failure mode, bad input, and never an orphan process."""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import types

import pytest
import torch

from companion.collectives import faulty, whoami
from companion.core import gpu_count
from companion.runtime import (
    LaunchError,
    LaunchTimeout,
    WorkerDied,
    WorkerError,
    launch,
    rank_device,
    threads_per_worker,
)
from companion.runtime.supervise import STOP_GRACE

pytestmark = pytest.mark.ch3


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (zombies included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_gone(pids, within: float = 0.0) -> None:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == [], "worker processes were left behind"


def written_pids(pid_dir) -> set[int]:
    return {int(f.read_text()) for f in pid_dir.glob("rank*.pid")}


# The launcher's contract on the CPU (gloo); the nccl case is the gpu-marked test below.
def test_results_come_back_in_rank_order_from_separate_processes():
    seen = launch(whoami, 3, backend="gloo")
    assert [s["rank"] for s in seen] == [0, 1, 2] == [s["group rank"] for s in seen]
    assert {s["world_size"] for s in seen} == {3}
    pids = [s["pid"] for s in seen]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert {s["backend"] for s in seen} == {"gloo"} and {s["device"] for s in seen} == {"cpu"}
    assert {s["threads"] for s in seen} == {threads_per_worker(3)}
    assert {s["MASTER_ADDR"] for s in seen} == {"127.0.0.1"} and len(
        {s["MASTER_PORT"] for s in seen}
    ) == 1
    assert {s["GLOO_SOCKET_IFNAME"] for s in seen} == {
        "lo" if sys.platform.startswith("linux") else "lo0"
    }
    assert_gone(pids)


def test_positional_and_keyword_arguments_reach_the_function():
    # how="raise" on a rank that does not exist: nobody fails, everyone returns its pid.
    pids = launch(faulty, 2, "raise", on_rank=7)
    assert len(pids) == 2 and all(isinstance(p, int) for p in pids)
    assert_gone(pids)


def test_a_raising_worker_is_reported_with_its_rank_and_traceback(tmp_path):
    with pytest.raises(WorkerError) as info:
        launch(faulty, 3, "raise", on_rank=1, pid_dir=str(tmp_path), timeout=60, backend="gloo")
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert str(err).startswith("worker rank 1 of 3 raised ValueError: rank 1 failed on purpose")
    assert (
        "Traceback of rank 1" in str(err)
        and 'raise ValueError(f"rank {rank} failed on purpose")' in err.traceback
    )
    assert "ranks 0, 2 had not finished and were stopped" in str(err)
    assert written_pids(tmp_path) == set(err.pids) and len(err.pids) == 3
    assert_gone(err.pids)


@pytest.mark.parametrize(
    "how, exitcode, words",
    [
        ("exit", 3, "exited with code 3"),
        ("signal", -signal.SIGKILL, "was killed by signal SIGKILL"),
    ],
)
def test_a_dying_worker_is_reported_and_the_others_are_stopped(tmp_path, how, exitcode, words):
    with pytest.raises(WorkerDied) as info:
        launch(faulty, 2, how, on_rank=1, pid_dir=str(tmp_path), timeout=60, backend="gloo")
    err = info.value
    assert err.rank == 1 and err.exitcode == exitcode
    assert str(err).startswith(f"worker rank 1 of 2 {words} before returning a result")
    assert written_pids(tmp_path) == set(err.pids)
    assert_gone(err.pids)


@pytest.fixture(scope="module")
def hang_timeout() -> int:
    """A launch deadline that leaves time to start two workers on *this* machine.

    Workers start in well under a second on a CPU-only machine, and several
    seconds slower where CUDA is present; the deadline is three times the
    slowest of two measured start-ups (at least 3 s, at most 60 s), so the
    hang, not the start-up, is what times out.
    """
    slowest = 0.0
    for _ in range(2):
        start = time.monotonic()
        launch(whoami, 2, timeout=120, backend="gloo")
        slowest = max(slowest, time.monotonic() - start)
    return min(60, max(3, math.ceil(3 * slowest)))


@pytest.mark.parametrize(
    "how", ["hang", "stubborn"]
)  # stubborn ignores SIGTERM: only SIGKILL ends it
def test_a_hanging_worker_times_out_and_is_killed(tmp_path, how, hang_timeout):
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(
            faulty, 2, how, on_rank=1, pid_dir=str(tmp_path), timeout=hang_timeout, backend="gloo"
        )
    elapsed = time.monotonic() - start
    err = info.value
    assert isinstance(err, TimeoutError) and err.ranks == [
        0,
        1,
    ]  # rank 0 waits for rank 1 in all_reduce
    assert f"timed out after {hang_timeout} s: ranks 0, 1 of 2 had not finished" in str(err)
    # the deadline, then the SIGTERM grace, plus slack for a loaded machine
    assert hang_timeout <= elapsed < hang_timeout + STOP_GRACE + 5
    assert written_pids(tmp_path) == set(err.pids)
    assert_gone(err.pids)


def test_workers_end_when_the_launching_process_is_killed(tmp_path):
    script = textwrap.dedent(f"""
        from companion.runtime.launcher import launch
        from companion.collectives.tour import faulty
        if __name__ == "__main__":
            launch(faulty, 2, "hang", on_rank=1, pid_dir={str(tmp_path)!r}, timeout=600, backend="gloo")
    """)
    # The killed parent cannot remove its fork server's folder: give it a folder of its own,
    # removed here. A short one: the server's socket path must fit in 107 bytes, and
    # tmp_path's depth grows with the number of pytest runs on the machine (pytest-NNN).
    own_tmp = tempfile.mkdtemp(prefix="kill-", dir="/tmp")
    env = {**os.environ, "TMPDIR": own_tmp}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while len(written_pids(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = written_pids(tmp_path)
        assert len(pids) == 2, "the workers did not start"
    finally:
        parent.kill()
        parent.wait(30)
    try:
        assert_gone(pids, within=15)  # each worker notices that its parent is gone and exits
    finally:
        shutil.rmtree(own_tmp, ignore_errors=True)


@pytest.mark.parametrize("world_size", [0, -1, 1.5, "2", True])
def test_bad_world_size(world_size):
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        launch(whoami, world_size)


def test_bad_timeout_backend_and_start_method():
    with pytest.raises(ValueError, match="timeout must be a positive"):
        launch(whoami, 1, timeout=0)
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        launch(whoami, 1, backend="mpi")
    with pytest.raises(ValueError, match="refused"):
        launch(whoami, 1, start_method="fork")


@pytest.mark.gpu
def test_with_a_gpu_per_rank_each_rank_gets_its_own_gpu_under_nccl():
    seen = launch(whoami, gpu_count())
    assert {s["backend"] for s in seen} == {"nccl"}
    assert [s["device"] for s in seen] == [f"cuda:{r}" for r in range(gpu_count())]


@pytest.mark.skipif(gpu_count() >= 2, reason="this machine has the GPUs that nccl needs")
def test_nccl_without_a_gpu_per_rank_is_refused():
    with pytest.raises(ValueError, match="needs one GPU per rank"):
        launch(whoami, 2, backend="nccl")


def test_an_explicit_port_is_used_and_a_busy_one_is_refused():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} is already in use"):
            launch(whoami, 2, port=port)
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = launch(whoami, 2, port=port)
    assert {s["MASTER_PORT"] for s in seen} == {str(port)}


def test_functions_the_workers_cannot_import_are_refused_clearly(monkeypatch):
    notebook_main = types.ModuleType("__main__")  # an interactive __main__ has no __file__
    monkeypatch.setitem(sys.modules, "__main__", notebook_main)

    def cell_function(rank, world_size):
        return rank

    cell_function.__module__, cell_function.__qualname__ = "__main__", "cell_function"
    with pytest.raises(TypeError, match="Move it into a module"):
        launch(cell_function, 2)
    with pytest.raises(TypeError, match="lambda"):
        launch(lambda rank, world_size: rank, 2)
    with pytest.raises(TypeError, match="picklable"):
        launch(whoami, 2, (x for x in range(3)))


def test_spawn_start_method_gives_the_same_results():
    seen = launch(whoami, 2, start_method="spawn")
    assert [s["rank"] for s in seen] == [0, 1]
    assert_gone([s["pid"] for s in seen])


def test_rank_device_and_threads_per_worker():
    assert rank_device(1, "nccl") == torch.device("cuda:1")
    assert rank_device(1, "gloo") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="no process group"):
        rank_device()
    cores = len(os.sched_getaffinity(0))
    assert threads_per_worker(1) == cores and threads_per_worker(10**6) == 1
    assert threads_per_worker(2) == max(1, cores // 2)


def test_stop_skips_a_worker_that_never_started():
    """A failed ``start()`` must surface as itself, not as an error from ``stop``."""
    import multiprocessing as mp

    from companion.runtime import stop

    never_started = mp.get_context("spawn").Process(target=print)
    stop([never_started])  # no "can only join a started process"
    assert never_started.pid is None


def test_stop_helpers_ends_and_reaps_the_fork_server_and_the_resource_tracker():
    # In a fresh process: this one's helpers serve the other tests.
    script = textwrap.dedent("""
        import os
        from companion.collectives import whoami
        from companion.runtime import launch, stop_helpers
        launch(whoami, 1)
        stop_helpers()
        try:
            os.waitpid(-1, os.WNOHANG)  # a child left, alive or a zombie, is found here
        except ChildProcessError:
            print("no child process left")
        print("launched again:", launch(whoami, 1)[0]["rank"])
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["no child process left", "launched again: 0"]


def test_stop_helpers_leaves_them_alone_while_a_launch_runs(tmp_path):
    # Workers hold the tracker's pipe: stopping it would wait for them.
    script = textwrap.dedent(f"""
        import threading, time, multiprocessing.forkserver as fs
        from companion.collectives.tour import faulty
        from companion.runtime import LaunchTimeout, launch, stop_helpers
        def run():
            try:
                launch(faulty, 2, "hang", on_rank=1, pid_dir={str(tmp_path)!r}, timeout=20)
            except LaunchTimeout:
                pass
        t = threading.Thread(target=run)
        t.start()
        import pathlib
        while len(list(pathlib.Path({str(tmp_path)!r}).glob("rank*.pid"))) < 2:
            time.sleep(0.1)
        stop_helpers()
        print("returned while the launch runs:", t.is_alive())  # it waits 20 s for the hang
        print("server kept:", fs._forkserver._forkserver_pid is not None)
        t.join()
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["returned while the launch runs: True", "server kept: True"]


def test_a_jupyter_kernel_that_launched_workers_exits_promptly_and_cleans_up(tmp_path):
    # A kernel asked to shut down signals its children and waits until none is
    # left; the fork server and the resource tracker used to hold it for about
    # 30 s, so Jupyter killed it and the scratch folder stayed behind.
    manager = pytest.importorskip("jupyter_client.manager")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    km, kc = manager.start_new_kernel(kernel_name="python3", env=env, cwd=os.getcwd())
    try:
        reply = kc.execute_interactive(
            "from companion.collectives import whoami\n"
            "from companion.core.files import scratch_dir\n"
            "from companion.runtime import launch\n"
            "work = scratch_dir('kernel-')\n"
            "print(len(launch(whoami, 2)))",
            timeout=120,
        )
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_wait_time = 20.0  # a request; SIGTERM at 10 s, SIGKILL at 20 s
        start = time.monotonic()
        km.shutdown_kernel(now=False)
        took = time.monotonic() - start
    assert took < 10.0, f"the kernel took {took:.1f} s to exit"
    assert [p.name for p in tmp_path.glob("kernel-*")] == [], "the scratch folder stayed"


def test_a_temporary_folder_too_deep_for_the_fork_servers_socket_is_refused_clearly(tmp_path):
    # Python's own error is "OSError: AF_UNIX path too long"; CI's chapter runs hit it.
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    import multiprocessing.util

    script = textwrap.dedent("""
        from companion.collectives import whoami
        from companion.runtime import launch
        try:
            print("ran:", [r["rank"] for r in launch(whoami, 2)])
        except ValueError as err:
            print("refused:", err)
        print("spawn:", [r["rank"] for r in launch(whoami, 2, start_method="spawn")])
    """)
    env = {**os.environ, "TMPDIR": str(deep)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    first, spawned = done.stdout.splitlines()
    if hasattr(multiprocessing.util, "_SUN_PATH_MAX"):  # this Python falls back by itself
        assert first == "ran: [0, 1]"
    else:
        assert "too deep for the fork server's socket" in first and "TMPDIR" in first
    assert spawned == "spawn: [0, 1]"
