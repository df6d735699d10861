"""The torch floor (refused below with a clear message) and the renamed collectives."""

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from companion.core import compat
from companion.core.compat import TORCH_FLOOR, all_gather_single, check_torch, reduce_scatter_single

pytestmark = pytest.mark.ch9

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_floor_is_the_one_pyproject_declares():
    declared = re.search(r'"torch>=([\d.]+)"', PYPROJECT.read_text())[1]
    assert declared == TORCH_FLOOR
    assert compat._major_minor(torch.__version__) >= compat._major_minor(TORCH_FLOOR)


@pytest.mark.parametrize("version", ["2.11.0", "2.11.0+cu130", "2.14.1+cpu", "3.0.0a0"])
def test_the_floor_and_newer_are_accepted(version):
    assert check_torch(version) == version


@pytest.mark.parametrize("version", ["2.10.1+cu128", "2.6.0", "1.13.1"])
def test_older_torch_is_refused_naming_both_versions(version):
    with pytest.raises(
        ImportError,
        match=rf"needs torch>={TORCH_FLOOR}, but torch {re.escape(version)}.*pip install",
    ):
        check_torch(version)


def test_a_version_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a torch version"):
        check_torch("nightly")


@pytest.mark.parametrize(
    "shim, new, old",
    [
        (reduce_scatter_single, "reduce_scatter_single", "reduce_scatter_tensor"),
        (all_gather_single, "all_gather_single", "all_gather_into_tensor"),
    ],
)
def test_each_collective_calls_the_name_this_torch_has_at_call_time(monkeypatch, shim, new, old):
    calls = []
    monkeypatch.setattr(dist, old, lambda *a, **k: calls.append((old, a, k)), raising=False)
    monkeypatch.setattr(dist, new, lambda *a, **k: calls.append((new, a, k)), raising=False)
    shim("out", "in", async_op=True)
    monkeypatch.delattr(dist, new)  # torch before 2.13
    shim("out", "in", group=None)
    assert calls == [
        (new, ("out", "in"), {"async_op": True}),
        (old, ("out", "in"), {"group": None}),
    ]
