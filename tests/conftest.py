"""Shared fixtures. Tests mirror the package modules and are marked per chapter."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it (pyplot keeps them open otherwise)."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` / ``multigpu`` when the GPUs are not there."""
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
    from companion.core.precision import strict_fp32

    with strict_fp32():
        yield


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
