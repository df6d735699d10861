"""When communication outweighs compute: the break-even per-device batch.

Used in: chapter 7.

A data-parallel step computes on ``b`` samples per device, then all-reduces
the gradients. The compute grows with ``b`` (about ``c0 + c1 b``); the
all-reduce moves the same bytes whatever ``b`` is. Below some per-device
batch ``b*`` the all-reduce takes longer than the compute, and without
overlap more devices mostly add waiting. :func:`time_parts` measures both
parts on every rank; :func:`breakeven` predicts ``b*`` from chapter 3's
alpha-beta model (fitted on all-reduces of *other* sizes) and reads the
measured one where the measured compute crosses the measured all-reduce.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..collectives.costmodel import cost_terms, fit_alpha_beta, predict
from ..core.checks import check_int
from ..core.devices import synchronize
from ..core.models import get_model
from ..core.training import set_seed
from ..runtime.group import rank_device
from ..runtime.launcher import launch

__all__ = [
    "Parts",
    "breakeven_text",
    "crossing",
    "find_breakeven",
    "fit_compute",
    "measure",
    "plot_breakeven",
    "time_parts",
]


class Parts(NamedTuple):
    """Median seconds (slowest rank) of a step's two parts, and an all-reduce size sweep."""

    world_size: int
    batches: list[int]
    compute: list[float]  # forward + backward at each per-device batch
    nbytes: int  # the gradients' bytes
    comm: float  # one all-reduce of them
    sweep_bytes: list[int]
    sweep_seconds: list[float]


def _median_time(fn, device, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def time_parts(
    rank: int,
    world_size: int,
    model: str,
    batches: Sequence[int],
    sweep: Sequence[int] = (2**10, 2**13, 2**16, 2**19),
    repeats: int = 5,
) -> Parts:
    """Worker: time forward+backward at each batch, and ``dist.all_reduce`` of the grads."""
    device = rank_device()
    set_seed(0)
    net, loss_fn = get_model(model).to(device), nn.CrossEntropyLoss()
    compute = []
    for b in batches:
        X = torch.randn(b, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (b,), device=device)
        compute.append(
            _median_time(lambda X=X, y=y: loss_fn(net(X), y).backward(), device, repeats)
        )
    grads = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    comm = _median_time(lambda: dist.all_reduce(grads.clone()), device, repeats)
    swept = []
    for numel in sweep:
        x = torch.randn(numel, device=device)
        swept.append(_median_time(lambda x=x: dist.all_reduce(x.clone()), device, repeats))
    times = torch.tensor([*compute, comm, *swept], dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step waits for the slowest rank
    t = times.tolist()
    n = len(batches)
    return Parts(
        world_size=world_size,
        batches=list(batches),
        compute=t[:n],
        nbytes=grads.numel() * grads.element_size(),
        comm=t[n],
        sweep_bytes=[4 * s for s in sweep],
        sweep_seconds=t[n + 1 :],
    )


def fit_compute(batches: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """``(c0, c1)``: compute seconds ``~ c0 + c1 * batch`` (relative least squares)."""
    return fit_alpha_beta(batches, seconds)


def crossing(batches: Sequence[int], compute: Sequence[float], comm: float) -> float | None:
    """The batch where measured compute first reaches ``comm`` (linear between points).

    ``0.0`` when compute outweighs communication at every batch measured, ``None``
    when it never does (the break-even lies beyond the largest batch).
    """
    if not batches or len(batches) != len(compute):  # zip would drop the extra points
        raise ValueError(
            f"give one compute time per batch size, got {len(batches)} batch sizes and "
            f"{len(compute)} times: pass Parts.batches and Parts.compute"
        )
    if compute[0] >= comm:
        return 0.0
    for (b0, t0), (b1, t1) in zip(zip(batches, compute), zip(batches[1:], compute[1:])):
        if t1 >= comm:
            return b0 + (b1 - b0) * (comm - t0) / (t1 - t0)
    return None


def find_breakeven(parts: Parts) -> dict:
    """Predicted and measured all-reduce time and break-even batch of ``parts``."""
    messages, volume = cost_terms("dist.all_reduce", parts.world_size)
    alpha, beta = fit_alpha_beta(parts.sweep_bytes, parts.sweep_seconds, messages, volume)
    predicted_comm = predict("dist.all_reduce", parts.world_size, parts.nbytes, alpha, beta)
    c0, c1 = fit_compute(parts.batches, parts.compute)
    return {
        "alpha": alpha,
        "beta": beta,
        "c0": c0,
        "c1": c1,
        "predicted_comm": predicted_comm,
        "measured_comm": parts.comm,
        "predicted_b": max(0.0, (predicted_comm - c0) / c1) if c1 > 0 else None,
        "measured_b": crossing(parts.batches, parts.compute, parts.comm),
    }


def measure(world_size: int, model: str, batches: Sequence[int], **kwargs) -> Parts:
    """:func:`time_parts` on ``world_size`` processes (rank 0's answer)."""
    check_int(world_size, "world_size", 2, "an all-reduce needs two ranks")
    return launch(time_parts, world_size, model, list(batches), timeout=600, **kwargs)[0]


def breakeven_text(value: float | None, batches: Sequence[int]) -> str:
    """A break-even batch as words: ``"b = 12"``, or where it lies outside the ``batches``
    measured (``"below 1"``, ``"beyond 256"``)."""
    if value is None:
        return f"beyond {max(batches)}"
    return f"below {min(batches)}" if value < min(batches) else f"b = {value:.0f}"


def _breakeven_x(value: float | None, batches: Sequence[int]) -> float:
    """Where a break-even's vertical line goes; outside the batches measured, at the edge."""
    if value is None:
        return max(batches)
    return min(max(value, min(batches)), max(batches))


def plot_breakeven(parts: Parts, found: dict, title: str = ""):
    """Compute against batch (measured, fitted) and the all-reduce (measured, predicted)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    b = parts.batches
    ax.plot(b, [t * 1e3 for t in parts.compute], "o", label="forward + backward (measured)")
    ax.plot(b, [(found["c0"] + found["c1"] * x) * 1e3 for x in b], "-", label="c0 + c1 b (fit)")
    ax.axhline(parts.comm * 1e3, color="C3", label="all-reduce of the gradients (measured)")
    ax.axhline(
        found["predicted_comm"] * 1e3,
        color="C3",
        linestyle="--",
        label="all-reduce (alpha-beta prediction)",
    )
    for key, style in (("measured_b", "-"), ("predicted_b", "--")):
        ax.axvline(
            _breakeven_x(found[key], b),
            color="gray",
            linestyle=style,
            alpha=0.6,
            label=f"{key[:-2]} break-even: {breakeven_text(found[key], b)}",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("per-device batch b")
    ax.set_ylabel("milliseconds per step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
