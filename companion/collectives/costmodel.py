"""The alpha-beta cost model of all-reduce: measure, fit, predict; bus bandwidth.

Used in: chapter 3 (chapter 6 reuses it to reason about bucket sizes).

One message of ``n`` bytes costs ``alpha + n * beta``: ``alpha`` is the
latency (seconds per message), ``beta`` the inverse bandwidth (seconds per
byte). An all-reduce algorithm on ``p`` ranks sends ``messages(p)`` messages
one after another, and ``volume(p) * n`` bytes must cross a link one after
another (see :func:`cost_terms`), so it takes about
``messages * alpha + volume * n * beta``.
Two numbers, fitted from measurements, then predict every algorithm at every
size.

Bus bandwidth follows the nccl-tests convention: ``algbw = bytes / time`` and
``busbw = algbw * 2 (p - 1) / p``, the rate each link must sustain in an
optimal all-reduce; it makes runs with different ``p`` comparable.
"""

from __future__ import annotations

import math
import numbers
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ..core.checks import check_int, check_positive
from ..core.devices import synchronize
from ..core.noise import rotated
from ..runtime.group import rank_device
from ..runtime.launcher import launch
from .allreduce import ALLREDUCES

__all__ = [
    "Measurement",
    "bus_bandwidth",
    "time_allreduce",
    "measure_allreduce",
    "cost_terms",
    "fit_alpha_beta",
    "fit_link",
    "predict",
    "plot_bandwidth",
    "plot_model",
]


@dataclass(frozen=True)
class Measurement:
    """Median time of an all-reduce of ``nbytes`` bytes per rank on ``world_size``
    (``rounds``: each timed round's seconds, when measured in rounds)."""

    algorithm: str
    world_size: int
    nbytes: int
    seconds: float
    rounds: tuple[float, ...] = ()

    @property
    def busbw(self) -> float:
        """Bus bandwidth in bytes per second (0 for one rank: no link is crossed)."""
        return bus_bandwidth(self.nbytes, self.seconds, self.world_size)


def bus_bandwidth(nbytes: float, seconds: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth in bytes/s: ``nbytes / seconds * 2 (p - 1) / p``."""
    _check_finite(nbytes, "nbytes")
    check_positive(seconds, "seconds", "give the measured time of one all-reduce")
    check_int(world_size, "world_size")
    return nbytes / seconds * 2 * (world_size - 1) / world_size


def time_allreduce(
    rank: int,
    world_size: int,
    numels: Sequence[int],
    algorithms: Sequence[str] = tuple(ALLREDUCES),
    repeats: int = 5,
    warmup: int = 1,
    dtype: torch.dtype = torch.float32,
) -> list[Measurement]:
    """Worker: time every algorithm at every size, interleaved; same list on every rank.

    A round runs each algorithm once, each after a barrier, who goes first
    rotating. A round's time is the slowest rank's (an all-reduce is done when
    the last rank is done); the median of ``repeats`` rounds is kept, after
    ``warmup`` untimed rounds, with the rounds themselves.
    """
    _check_timing(numels, algorithms, repeats, warmup)
    device = rank_device()
    times = torch.zeros(len(numels), len(algorithms), warmup + repeats, dtype=torch.float64)
    for i, numel in enumerate(numels):
        x = torch.randn(numel, dtype=dtype, device=device)
        for r in range(warmup + repeats):
            for j, name in rotated(list(enumerate(algorithms)), r):
                y = x.clone()
                dist.barrier()
                synchronize(device)
                start = time.perf_counter()
                ALLREDUCES[name](y)
                synchronize(device)
                times[i, j, r] = time.perf_counter() - start
    times = times.to(device)  # nccl all-reduces CUDA tensors only
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    times = times.cpu()
    size = torch.empty(0, dtype=dtype).element_size()
    found = []
    for i, n in enumerate(numels):
        for j, name in enumerate(algorithms):
            rounds = tuple(times[i, j, warmup:].tolist())
            seconds = statistics.median(rounds)
            found.append(Measurement(name, world_size, n * size, seconds, rounds=rounds))
    return found


def measure_allreduce(
    world_sizes: Sequence[int],
    numels: Sequence[int],
    algorithms: Sequence[str] = tuple(ALLREDUCES),
    repeats: int = 5,
    timeout: float = 300.0,
) -> list[Measurement]:
    """:func:`time_allreduce`, launched once per world size; one list of everything."""
    for p in world_sizes:
        check_int(p, "world_size")
    _check_timing(numels, algorithms, repeats)
    found = []
    for p in world_sizes:
        found += launch(time_allreduce, p, numels, algorithms, repeats, timeout=timeout)[0]
    return found


def cost_terms(algorithm: str, world_size: int) -> tuple[float, float]:
    """``(messages, volume)``: cost ``= messages * alpha + volume * nbytes * beta``.

    The pipelined ring counts as the ring (its segments overlap), and so does
    ``dist.all_reduce``: a ring is what gloo and NCCL use for large messages.
    """
    p = _check_cost(algorithm, world_size)
    if p == 1:
        return 0.0, 0.0
    if algorithm == "naive":
        return 2.0 * (p - 1), 2.0 * (p - 1)
    if algorithm == "recursive doubling":
        steps = math.floor(math.log2(p)) + (0 if p & (p - 1) == 0 else 2)
        return float(steps), float(steps)
    return 2.0 * (p - 1), 2.0 * (p - 1) / p  # ring, pipelined ring, dist.all_reduce


def _check_cost(algorithm: str, world_size: int) -> int:
    if algorithm not in ALLREDUCES:
        raise ValueError(f"no cost model for {algorithm!r}; choose from {list(ALLREDUCES)}")
    return check_int(world_size, "world_size")


def _check_finite(value: float, name: str) -> None:
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 <= value < math.inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_timing(numels, algorithms, repeats: int, warmup: int = 0) -> None:
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numels):
        raise ValueError(f"numels must be integers >= 0, got {list(numels)}")
    unknown = sorted(set(algorithms) - set(ALLREDUCES))
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; choose from {list(ALLREDUCES)}")
    check_int(repeats, "repeats")
    check_int(warmup, "warmup", 0)


def _check_pairs(n: np.ndarray, t: np.ndarray) -> None:
    if t.shape != n.shape or t.size < 2:
        raise ValueError(f"need at least two (nbytes, seconds) pairs, got {n.size}, {t.size}")
    if np.any(t <= 0):
        raise ValueError("measured times must be positive")


def fit_alpha_beta(
    nbytes: Sequence[float], seconds: Sequence[float], messages=1.0, volume=1.0
) -> tuple[float, float]:
    """Least squares ``alpha, beta >= 0``: ``seconds ~ m * alpha + v * nbytes * beta``.

    ``m`` is ``messages`` and ``v`` is ``volume``: numbers, or one per
    measurement (1 and 1 fit a plain straight line). Errors are *relative*
    (each row divided by its measured time): sizes span orders of magnitude,
    and plain least squares would fit the largest messages and leave the
    latency to chance. A parameter that the data push below zero is set to
    zero and the other one refitted.
    """
    t, n = np.asarray(seconds, dtype=float), np.asarray(nbytes, dtype=float)
    _check_pairs(n, t)
    columns = [np.broadcast_to(messages, t.shape), np.broadcast_to(volume, t.shape) * n]
    A, b = np.stack(columns, axis=1) / t[:, None], np.ones_like(t)
    alpha, beta = np.linalg.lstsq(A, b, rcond=None)[0]
    if alpha >= 0 and beta >= 0:
        return float(alpha), float(beta)
    fits = []  # the best of the two one-parameter fits
    for k in (0, 1):
        c = max(0.0, float(A[:, k] @ b / (A[:, k] @ A[:, k])))
        fits.append((float(np.sum((A[:, k] * c - b) ** 2)), k, c))
    _, k, c = min(fits)
    return (c, 0.0) if k == 0 else (0.0, c)


def fit_link(
    measurements: Sequence[Measurement], algorithms: Sequence[str] | None = None
) -> tuple[float, float]:
    """One ``(alpha, beta)`` for the link, fitted to every algorithm at 2+ ranks."""
    rows = [m for m in measurements if m.world_size > 1]
    rows = [m for m in rows if algorithms is None or m.algorithm in algorithms]
    terms = np.array([cost_terms(m.algorithm, m.world_size) for m in rows]).reshape(-1, 2)
    sizes, times = [m.nbytes for m in rows], [m.seconds for m in rows]
    return fit_alpha_beta(sizes, times, terms[:, 0], terms[:, 1])


def predict(algorithm: str, world_size: int, nbytes: float, alpha: float, beta: float) -> float:
    """Seconds the model predicts for one all-reduce of ``nbytes`` bytes per rank."""
    for name, value in (("nbytes", nbytes), ("alpha", alpha), ("beta", beta)):
        _check_finite(value, name)
    messages, volume = cost_terms(algorithm, world_size)
    return messages * alpha + volume * nbytes * beta


def _panels(measurements: Sequence[Measurement], ylabel: str, title: str):
    """One log-log panel per world size of 2 or more, and the series to draw in each."""
    import matplotlib.pyplot as plt

    sizes = sorted({m.world_size for m in measurements if m.world_size > 1})
    if not sizes:
        raise ValueError("the plot needs measurements with 2 or more processes")
    fig, axes = plt.subplots(
        1,
        len(sizes),
        figsize=(9.0, 3.6),
        sharey=True,  # fits the page unscaled
    )
    axes = np.atleast_1d(axes)
    for ax, p in zip(axes, sizes):
        ax.set(xscale="log", yscale="log", xlabel="bytes per rank")
        ax.set_title(f"{p} processes", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    series = {}
    for ax, p in zip(axes, sizes):
        for name in dict.fromkeys(m.algorithm for m in measurements):
            ms = [m for m in measurements if m.world_size == p and m.algorithm == name]
            series[ax, p, name] = sorted(ms, key=lambda m: m.nbytes)
    return fig, axes, series


def plot_bandwidth(measurements: Sequence[Measurement], title: str = ""):
    """Bus bandwidth against message size: panels by world size, lines by algorithm."""
    fig, axes, series = _panels(measurements, "bus bandwidth (GB/s)", title)
    for (ax, _, name), ms in series.items():
        ax.plot([m.nbytes for m in ms], [m.busbw / 1e9 for m in ms], "o-", ms=3, label=name)
    axes[0].legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_model(measurements: Sequence[Measurement], alpha: float, beta: float, title: str = ""):
    """Measured times (points) and the model's predictions (lines), per world size."""
    fig, axes, series = _panels(measurements, "seconds per all-reduce", title)
    colors = {}
    for (ax, p, name), ms in series.items():
        color = colors.setdefault(name, f"C{len(colors)}")
        n = [m.nbytes for m in ms]
        ax.plot(n, [m.seconds for m in ms], "o", ms=3, color=color, label=name)
        ax.plot(n, [predict(name, p, x, alpha, beta) for x in n], "-", color=color)
    axes[0].legend(fontsize=8, title="points: measured\nlines: model", title_fontsize=8)
    fig.tight_layout()
    return fig
