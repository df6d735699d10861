"""Are chapter 6's wrappers drop-ins? Each pattern torch's DDP allows, run under each wrapper.

Used in: chapter 6 (the table) and ``tests/internals/test_dropin.py`` (the proof).

:func:`dropin_worker` runs every case of :mod:`.dropin_cases` on this rank, under
torch's ``DistributedDataParallel`` and under each rebuilt wrapper, on small
float64 models whose inputs differ from rank to rank, and returns what each
left in ``.grad``, or the error it raised. A case ends as the next step
would begin, with one more forward pass: torch's DDP names a step that
never completed there, and so do the wrappers. :func:`dropin_table` compares
each wrapper's result with torch's on the same case.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .buckets import BucketedDDP
from .dropin_cases import CASES, _Spare, _Two
from .hooks import HookedDDP
from .naive import NaiveDDP

__all__ = ["WRAPPERS", "dropin_worker", "dropin_table", "unused_after_accumulation"]

WRAPPERS = ("torch DDP", "NaiveDDP", "HookedDDP", "BucketedDDP")


def _wrap(model: nn.Module, variant: str, find_unused: bool) -> nn.Module:
    if variant == "torch DDP":
        return DistributedDataParallel(model, find_unused_parameters=find_unused)
    if variant == "BucketedDDP":  # one bucket per parameter: the order of buckets matters
        return BucketedDDP(model, 1e-5, find_unused_parameters=find_unused)
    return {"NaiveDDP": NaiveDDP, "HookedDDP": HookedDDP}[variant](model)


def _input(kind: str, rank: int):
    if kind == "index":
        return torch.tensor([rank % 4, (rank + 1) % 4])
    if kind == "bags":  # two bags of two indices
        return torch.tensor([[rank % 4, (rank + 1) % 4], [(rank + 2) % 4, 3]])
    if kind == "none":
        return None
    x = torch.tensor([[rank + 1.0, 0.5 - rank], [2.0, rank * 0.25]], dtype=torch.float64)
    return x.requires_grad_(kind == "grad")


def _grads(model: nn.Module) -> dict:
    """Each parameter's gradient (dense), and how many sparse dimensions a sparse one has."""
    out = {}
    for n, p in model.named_parameters():
        out[n] = None if p.grad is None else p.grad.to_dense().clone()
        if p.grad is not None and p.grad.is_sparse:
            out[f"{n}: sparse dims"] = p.grad.sparse_dim()
    return out


def _raised(err: Exception) -> str:
    return f"raises {type(err).__name__}: {str(err).splitlines()[0][:160]}"


def run_case(name: str, variant: str):
    """``{parameter: gradient}`` ``variant`` leaves after case ``name``, or ``'raises: ...'``."""
    _, build, kind, find_unused, steps = CASES[name]
    torch.manual_seed(0)
    model = build().double()
    x = _input(kind, dist.get_rank())
    try:
        net = _wrap(model, variant, find_unused)
        if name == "create_graph":  # no next step: torch's DDP refuses a forward pass then
            with _stderr_silenced():
                steps(net, x)
        else:
            steps(net, x)
            net() if x is None else net(x)  # the next step begins: an incomplete one is named here
        return _grads(model)
    except Exception as err:  # noqa: BLE001 - the table reports what each one raised
        return _raised(err)
    finally:
        gc.collect()


@contextmanager
def _stderr_silenced():
    """Nothing printed to stderr inside: with ``create_graph=True`` torch's DDP and autograd
    print that higher-order gradients are not synchronised and that ``.grad`` holds a cycle."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _lifetime_cases(variant: str) -> dict:
    """A wrapper built twice over one model, and a model trained alone after its wrapper is gone."""
    out, x = {}, _input("dense", dist.get_rank())
    torch.manual_seed(0)
    model = _Two().double()
    first = _wrap(model, variant, False)
    second = _wrap(model, variant, False)  # a notebook cell run twice
    second(x).sum().backward()
    out["wrapped twice"] = _grads(model)
    del first, second
    gc.collect()
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    out["wrapper deleted"] = _grads(model)
    try:
        _wrap(nn.Linear(2, 2).requires_grad_(False), variant, False)
        out["no trainable parameter"] = "accepted"
    except Exception as err:  # noqa: BLE001
        out["no trainable parameter"] = _raised(err)
    return out


LIFETIME = {
    "wrapped twice": "a second wrapper over the same model (a cell run twice)",
    "wrapper deleted": "the model trained alone after its wrapper was deleted",
    "no trainable parameter": "a module with no parameter to train",
}


def dropin_worker(rank: int, world_size: int) -> dict:
    """``{(case, wrapper): result}`` for every case and wrapper, on this rank."""
    out = {}
    for variant in WRAPPERS:
        for name in CASES:
            out[name, variant] = run_case(name, variant)
            dist.barrier()
        for name, result in _lifetime_cases(variant).items():
            out[name, variant] = result
        dist.barrier()
    return out


def same_result(got, want) -> bool:
    """Both raised, or both left the same gradients (to float64 rounding)."""
    if isinstance(got, str) or isinstance(want, str):
        return isinstance(got, str) and isinstance(want, str)
    if got.keys() != want.keys():
        return False
    for name in want:
        a, b = got[name], want[name]
        if (a is None) != (b is None):
            return False
        if isinstance(a, int) or isinstance(b, int):  # a sparse gradient's dimensions
            if a != b:
                return False
        elif a is not None and not torch.allclose(a, b, rtol=1e-12, atol=1e-12):
            return False
    return True


def _why(error: str) -> str:
    if error.startswith("raises UnusedParameters"):
        return "names the unused parameter (no find_unused_parameters)"
    return error.removeprefix("raises ")


def dropin_table(results: dict) -> list[tuple[str, ...]]:
    """Rows ``(pattern, torch's DDP, NaiveDDP, HookedDDP, BucketedDDP)`` from one rank's results."""
    rows = []
    for name, description in [*((n, c[0]) for n, c in CASES.items()), *LIFETIME.items()]:
        want = results[name, "torch DDP"]
        row = [description, "refuses" if isinstance(want, str) else "runs"]
        for variant in WRAPPERS[1:]:
            got = results[name, variant]
            if same_result(got, want):
                row.append("refuses, as torch" if isinstance(got, str) else "same gradients")
            elif isinstance(got, str):
                row.append("refuses: " + _why(got))
            elif isinstance(want, str):
                row.append("runs, where torch refuses")
            else:
                row.append("DIFFERENT gradients")
        rows.append(tuple(row))
    return rows


def unused_after_accumulation(rank: int, world_size: int) -> dict:
    """Worker: ``a.weight``'s gradient in case ``"accumulate, then unused"``, step by step.

    ``{wrapper: (after the no_sync() micro-step, after the synchronised one)}``
    for torch's DDP and ``BucketedDDP``, both with ``find_unused_parameters=True``.
    """
    out = {}
    for variant in ("torch DDP", "BucketedDDP"):
        torch.manual_seed(0)
        model, x = _Spare().double(), _input("dense", rank)
        net = _wrap(model, variant, True)
        with net.no_sync():
            net(x, True).sum().backward()
        before = model.a.weight.grad.clone()
        net(x, False).sum().backward()  # a is not used: its accumulated gradient is averaged
        out[variant] = (before, model.a.weight.grad.clone())
    return out
