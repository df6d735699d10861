"""Per-rank memory of the model states: measured, against the ZeRO formulas; does it fit?

Used in: chapter 9.

With ``psi`` trainable parameters, training with Adam holds three things per
rank (activations come on top and depend on the batch):

=========  =============  =============  ===============
method     parameters     gradients      optimizer state
=========  =============  =============  ===============
DDP        ``P psi``      ``G psi``      ``K psi``
ZeRO-1     ``P psi``      ``G psi``      ``K psi / N``
ZeRO-2     ``P psi``      ``G psi / N``  ``K psi / N``
ZeRO-3     ``P psi / N``  ``G psi / N``  ``K psi / N``
=========  =============  =============  ===============

fp32 Adam: ``P = 4, G = 4, K = 8`` (two moments), 16 bytes per parameter
in all. Mixed precision as the ZeRO paper counts it: bf16 parameters and
gradients (``P = G = 2``) and, in the optimizer, an fp32 master copy plus
the moments (``K = 12``): 16 again. Autocast (this book's bf16) keeps the
fp32 parameter as the master and makes bf16 copies per operation, so it
holds the fp32 split: the same total for DDP and ZeRO-3, but for ZeRO-1 and
ZeRO-2 whole fp32 parameters where the formula has whole bf16 ones (and
ZeRO-1 whole fp32 gradients). ``ZeroRedundancyOptimizer`` is ZeRO-1 and
FSDP2 is ZeRO-3.

:func:`measure_state` measures the same three numbers from the live
tensors of any method (bytes of distinct storages, so a view is counted
once and a freed buffer not at all); :func:`saved_bytes` counts what
a step holds on top, the weights and activations autograd saved during forward;
:func:`fits` is the calculator.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from ..core.checks import check_choice, check_int, check_module, check_positive
from ..core.figures import headroom, legend_below
from .freed import is_placeholder

__all__ = [
    "BYTES_PER_PARAMETER",
    "formula_bytes",
    "measure_state",
    "saved_bytes",
    "saved_weight_bytes",
    "fits",
    "plot_memory",
]

BYTES_PER_PARAMETER = {"fp32": (4, 4, 8), "mixed": (2, 2, 12)}  # (P, G, K)
SHARDED = {  # which of (parameters, gradients, optimizer state) are split N ways
    "DDP": (False, False, False),
    "ZeRO-1": (False, False, True),
    "ZeRO-2": (False, True, True),
    "ZeRO-3": (True, True, True),
}
SAME_AS = {"ZeroRedundancyOptimizer": "ZeRO-1", "FSDP2": "ZeRO-3", "ZeRO-3 prefetch": "ZeRO-3"}


def _check_formula(method: str, psi: int, world_size: int, precision: str) -> int:
    check_choice(method, "method", [*SHARDED, *SAME_AS])
    check_choice(precision, "precision", list(BYTES_PER_PARAMETER))
    check_int(psi, "psi", 0)
    return check_int(world_size, "world_size")


def formula_bytes(
    method: str, psi: int, world_size: int, precision: str = "fp32"
) -> dict[str, float]:
    """``{"params", "grads", "optimizer", "total"}`` bytes per rank by the table above."""
    method = SAME_AS.get(method, method)
    n = _check_formula(method, psi, world_size, precision)
    out = {
        key: b * psi / (n if split else 1)
        for key, b, split in zip(
            ("params", "grads", "optimizer"), BYTES_PER_PARAMETER[precision], SHARDED[method]
        )
    }
    out["total"] = sum(out.values())
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (``None`` skipped)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None and not is_placeholder(t := _local(t)):
            s = t.untyped_storage()
            if s.nbytes():
                seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def measure_state(model: nn.Module, optimizer: Any, buffers=()) -> dict[str, int]:
    """Bytes this rank holds for trainable parameters, their gradients and optimizer state.

    Call it after ``optimizer.step()`` (the state exists) and before ``zero_grad()``.
    With ``buffers`` (a collective's tensors), ``"buffers"`` adds the bytes of their
    storages that are none of the three: what the collective needs on top.
    """
    check_module(model, "model")
    params = [p for p in model.parameters() if p.requires_grad]
    params += [p for g in optimizer.param_groups for p in g["params"]]
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's local one
    state = [
        v for s in inner.state.values() for k, v in s.items() if torch.is_tensor(v) and k != "step"
    ]
    out = {
        "params": _storage_bytes(params),
        "grads": _storage_bytes(p.grad for p in params),
        "optimizer": _storage_bytes(state),
    }
    if buffers:
        whole = _storage_bytes([*params, *(p.grad for p in params), *state, *buffers])
        out["buffers"] = whole - sum(out.values())
    out["total"] = sum(out.values())
    return out


def saved_bytes(model: nn.Module, X: torch.Tensor, autocast=None) -> dict[str, int]:
    """``{"weights", "activations"}``: bytes that autograd saved for backward and still holds
    once ``model(X)`` has returned (under the ``autocast`` context, if given), one count
    per storage. Weights are the parameters or copies made from them (autocast's casts):
    a freed ZeRO-3 or FSDP2 unit holds none. No backward runs: the graph is dropped."""
    check_module(model, "model")
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast or nullcontext():
        out = model(X)
    weight = [_from_weight(t) for t in saved]
    held = {
        "weights": _storage_bytes(t for t, w in zip(saved, weight) if w),
        "activations": _storage_bytes(t for t, w in zip(saved, weight) if not w),
    }
    saved.clear()  # the graph goes with out
    del out
    return held


def saved_weight_bytes(model: nn.Module, X: torch.Tensor, autocast=None) -> int:
    """The weights of :func:`saved_bytes`: what a step holds on top of the model states."""
    return saved_bytes(model, X, autocast)["weights"]


def _from_weight(t: torch.Tensor, hops: int = 3) -> bool:
    """A parameter (a leaf that needs a gradient), or made from one by a chain of one-input
    operations (a cast, a transpose) short enough to be a weight's copy, not an activation."""
    if t.is_leaf:
        return t.requires_grad
    fn = t.grad_fn
    for _ in range(hops):
        inputs = [f for f, _ in fn.next_functions if f is not None]
        if len(inputs) != 1:
            return False
        fn = inputs[0]
        if type(fn).__name__ == "AccumulateGrad":
            return True
    return False


def fits(
    psi: int,
    world_size: int,
    memory_gib: float,
    method: str,
    precision: str = "fp32",
    activations_gib: float = 0.0,
) -> tuple[bool, float]:
    """``(fits, GiB per rank)``: do ``psi`` parameters' states plus ``activations_gib`` fit?"""
    check_positive(memory_gib, "memory_gib", "give the memory of one device in GiB, e.g. 80")
    need = formula_bytes(method, psi, world_size, precision)["total"] / 2**30 + activations_gib
    return need <= memory_gib, need


def plot_memory(measured: dict[int, dict[str, dict]], title: str = ""):
    """Stacked bars: rank 0's measured bytes per method and world size; ticks: the formula."""
    import matplotlib.pyplot as plt

    if not measured:
        raise ValueError("give {world size: {method: state_worker's result}} for one or more sizes")
    sizes = sorted(measured)
    methods = list(measured[sizes[0]])
    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    width = 0.8 / len(sizes)
    for k, n in enumerate(sizes):
        for i, method in enumerate(methods):
            r = measured[n][method]
            x, bottom = i + (k - (len(sizes) - 1) / 2) * width, 0.0
            for part, color in zip(("params", "grads", "optimizer"), ("C0", "C1", "C2")):
                kib = r["state"][part] / 1024
                ax.bar(
                    x,
                    kib,
                    width * 0.9,
                    bottom=bottom,
                    color=color,
                    label=part if (k, i) == (0, 0) else None,
                )
                bottom += kib
            ax.plot(
                [x - width * 0.45, x + width * 0.45],
                [formula_bytes(method, r["psi"], n)["total"] / 1024] * 2,
                color="k",
                lw=1.5,
                label="formula" if (k, i) == (0, 0) else None,
            )
            ax.text(x, bottom, f"{n}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(methods)), methods, fontsize=8, rotation=12)
    ax.set_ylabel("KiB per rank (rank 0)")
    ax.set_title(title + "\n(the number over a bar: world size)", fontsize=9)
    headroom(ax, room=0.1)  # the world sizes written over the bars stay inside
    legend_below(fig, ax)
    return fig
