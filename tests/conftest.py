"""Shared fixtures. Tests mirror the package modules and are marked per chapter."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(scope="session")
def sample():
    """The offline MNIST sample (4,000 training and 1,000 test digits), read once."""
    from companion.core import load_mnist_sample

    return load_mnist_sample()


@pytest.fixture(scope="session")
def small_sample(sample):
    """256 training and 64 test digits of the sample, drawn at random (seed 0)."""
    from companion.study.driver import subset

    return subset(sample, 256, 64)


@pytest.fixture(scope="session")
def small(sample):
    """The sample's first 601 training and 203 test images: neither divides by 2 or 4, so a
    ``DistributedSampler`` pads (a module may define a ``small`` of its own)."""
    from companion.core.data import Data, ImageSet

    cut = lambda split, n: ImageSet(split.images[:n], split.labels[:n])  # noqa: E731
    return Data("small", cut(sample.train, 601), cut(sample.test, 203), sample.classes)


@pytest.fixture
def no_torchrun(monkeypatch):
    """No torchrun variables in the environment: a command line run as a reader types it."""
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
    ):
        monkeypatch.delenv(name, raising=False)


def pytest_configure(config):
    """nbval's kernels exit as a reader's Jupyter kernel does, into a folder of their own."""
    _nbval_kernels_exit_cleanly()
    _installed_package_if_asked()
    _xdist_worker_owns_its_cores()


def _xdist_worker_owns_its_cores() -> None:
    """Under pytest-xdist (``make gpu-check-quick``: ``-n 8`` on 16 cores) each worker
    runs on its own slice of the cores, as if it were a machine of that size.

    Without it every worker's torch takes every core and every launched rank takes
    ``cores // world_size`` threads: on 16 cores, 8 workers would run about 128
    threads, and a test's time limit would measure the crowd, not the test. The
    launched ranks inherit the slice (``core.devices.cpu_cores`` reads the affinity).
    """
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return
    cores, n, i = sorted(os.sched_getaffinity(0)), int(count), int(worker.removeprefix("gw"))
    share = max(1, len(cores) // n)
    mine = cores[(i * share) % len(cores) :][:share] or cores[:share]
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))


def _cells_get_nbvals_limit(config, items) -> None:
    """A notebook cell is held to nbval's limit (``--nbval-cell-timeout``, 1800 s in the
    Makefile), not to pytest-timeout's 300 s for a test: both are hang detectors, and on
    2 cores beside two busy processes chapter 2's benchmark cell ran past 300 s."""
    limit = config.getoption("nbval_cell_timeout", default=None)
    if limit is None:
        return
    for item in items:
        if type(item).__name__ == "IPyNbCell":  # nbval's item: one cell
            item.add_marker(pytest.mark.timeout(float(limit)))


def _installed_package_if_asked() -> None:
    """With ``COMPANION_FROM_WHEEL=1`` (CI's Colab leg), the tests must be testing the
    installed wheel, not the source tree beside them."""
    if os.environ.get("COMPANION_FROM_WHEEL") == "1":
        import companion

        where = Path(companion.__file__).resolve()
        if "site-packages" not in where.parts:
            raise pytest.UsageError(
                f"COMPANION_FROM_WHEEL=1, but companion was imported from {where}: run "
                f"pytest from outside the checkout with --import-mode=append (make colab-test)"
            )


def _nbval_kernels_exit_cleanly() -> None:
    """Each nbval kernel gets a fresh ``TMPDIR``, exits by itself, and must leave it empty.

    nbval stops a notebook's kernel with ``shutdown_kernel(now=True)``, a kill:
    the kernel's ``atexit`` handlers never run, so the work folders that
    ``companion.core.files.scratch_dir`` removes at exit stayed in ``/tmp``.
    Jupyter (and ``.ci/execute_notebooks.py``) ask the kernel to shut down and
    wait; so does this, and then a file left in the kernel's ``TMPDIR`` is an
    error of the notebook's last cell, as a leftover is in ``make profile-check``.
    A kernel that launched workers exits in about 2 s: the launcher ends its
    fork server when the kernel is told to exit (``runtime.supervise.stop_helpers``).
    """
    try:
        from nbval import kernel
    except ImportError:  # nbval is not installed: no notebooks are collected
        return
    start, running = kernel.RunningKernel.__init__, kernel.RunningKernel
    if getattr(running, "_book_patched", False):
        return
    tempfile.gettempdir()  # this process keeps the system's; only the kernel moves

    def __init__(self, *args, **kwargs):
        self.book_tmp = Path(tempfile.mkdtemp(prefix="nbval-kernel-"))
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(self.book_tmp)  # read when the kernel starts
        try:
            start(self, *args, **kwargs)
        finally:
            if before is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = before

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_wait_time = 30.0  # a request; SIGTERM at 15 s, SIGKILL at 30 s
        self.km.shutdown_kernel(now=False)
        del self.km
        tmp = self.__dict__.pop("book_tmp", None)
        if tmp is None:
            return
        leftovers = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
        shutil.rmtree(tmp, ignore_errors=True)
        if leftovers:
            raise AssertionError(
                f"the notebook's kernel left {leftovers} in its temporary folder: "
                f"make its work folder with companion.core.files.scratch_dir"
            )

    running.__init__, running.stop, running._book_patched = __init__, stop, True


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it (pyplot keeps them open otherwise)."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` / ``multigpu`` when the GPUs are not there; notebook
    cells get nbval's own time limit."""
    _cells_get_nbvals_limit(config, items)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "gpu" in item.keywords and n < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "multigpu" in item.keywords and n < 2:
            item.add_marker(pytest.mark.skip(reason="needs at least two CUDA GPUs"))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each device kind this machine has: the CPU, and the first GPU when there is one."""
    return torch.device(request.param)


@pytest.fixture
def strict():
    """Equivalence checks compare fp32 with fp32: TF32 off (on a GPU) for the test."""
    from companion.core.tf32 import strict_fp32

    with strict_fp32():
        yield


@pytest.fixture
def deterministic(monkeypatch):
    """Bit-for-bit claims on a GPU: cuDNN's deterministic kernels for the test. Its default
    convolution backward may add partial sums in a different order on every call (atomics),
    so the same step run twice can differ in the last bit there; on a CPU this changes nothing."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write ``array`` (uint8) in the IDX format that (Fashion-)MNIST files use."""
    magic = {1: 0x0801, 3: 0x0803}[array.ndim]
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic))
        f.write(struct.pack(">" + "I" * array.ndim, *array.shape))
        f.write(array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_fashion_root(tmp_path: Path) -> Path:
    """A data root holding a tiny Fashion-MNIST in torchvision's raw layout (12 train, 5 test)."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 12), ("t10k", 5)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    return tmp_path
