"""Chapter 4's four steps drawn from a run: scatter, replicate, parallel_apply, gather.

Used in: chapter 4.

:func:`record_forward` makes one forward call the way
:class:`~companion.dataparallel.rebuild.DataParallelByHand` does, with the
same four functions of :mod:`companion.dataparallel.rebuild`, and records
what each step produced (shapes and devices) and when it ran. The replica
threads' start and end times are measured inside the threads: each replica
is handed to ``parallel_apply`` wrapped in a callable that notes the time
around the replica's call. Nothing in ``companion.dataparallel`` changes.
:func:`plot_forward` draws the record; :mod:`.backward` draws the backward pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from companion.core.devices import Device, as_devices
from companion.dataparallel.rebuild import gather, parallel_apply, replicate, scatter

from .style import figure, rank_color

__all__ = ["ForwardTrace", "record_forward", "plot_forward"]

Span = tuple[str, float, float]  # (what, start, end), seconds since the call began


class ForwardTrace(NamedTuple):
    """One forward call of ``DataParallelByHand``, as :func:`record_forward` saw it."""

    input: tuple[tuple[int, ...], str]  # shape and device of X
    chunks: list[tuple[tuple[int, ...], str]]  # shape and device of each chunk
    replicas: list[tuple[str, bool]]  # each replica's device; whether it views net's tensors
    outputs: list[tuple[tuple[int, ...], str]]  # shape and device of each replica's output
    output: tuple[tuple[int, ...], str]  # the gathered output
    steps: list[tuple[str, float, float]]  # the four steps, in the calling thread
    threads: list[tuple[str, float, float]]  # each replica's call, in its own named thread


class _Timed:
    """A replica that notes, in the thread that calls it, when its call starts and ends."""

    def __init__(self, replica: nn.Module, spans: list, i: int, t0: float):
        self.replica, self.spans, self.i, self.t0 = replica, spans, i, t0

    def __call__(self, *inputs: Any) -> Any:
        start = time.perf_counter()
        out = self.replica(*inputs)
        end = time.perf_counter()
        self.spans[self.i] = (threading.current_thread().name, start - self.t0, end - self.t0)
        return out


def _where(t: torch.Tensor) -> tuple[tuple[int, ...], str]:
    return tuple(t.shape), str(t.device)


def record_forward(
    net: nn.Module, X: torch.Tensor, devices: Sequence[Device]
) -> tuple[torch.Tensor, ForwardTrace]:
    """``DataParallelByHand(net, devices)(X)``, step by step: the output and the record.

    Needs at least two chunks (with one device the module is simply called).
    The output lands on ``devices[0]``.
    """
    devices = as_devices(devices)
    steps: list[Span] = []
    t0 = time.perf_counter()

    def timed(name: str, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        steps.append((name, start - t0, time.perf_counter() - t0))
        return result

    chunks = timed("scatter", scatter, (X,), devices)
    if len(chunks) < 2:
        raise ValueError(
            f"a batch of {len(X)} on {len(devices)} device(s) makes one chunk, and the "
            f"module is simply called: record a batch of at least two samples on two devices"
        )
    used = devices[: len(chunks)]
    replicas = timed("replicate", replicate, net, used, not torch.is_grad_enabled())
    spans: list = [None] * len(replicas)
    wrapped = [_Timed(r, spans, i, t0) for i, r in enumerate(replicas)]
    outputs = timed("parallel_apply", parallel_apply, wrapped, chunks, used)
    y_hat = timed("gather", gather, outputs, devices[0])
    first = next(net.parameters()).data_ptr()
    shares = []  # does the replica see net's first parameter itself (a view)?
    for r in replicas:  # its parameters are plain tensor attributes of its modules
        own = [t for m in r.modules() for t in vars(m).values() if isinstance(t, torch.Tensor)]
        shares.append(any(t.data_ptr() == first for t in own))
    trace = ForwardTrace(
        input=_where(X),
        chunks=[_where(c[0]) for c in chunks],
        replicas=[(str(d), s) for d, s in zip(used, shares)],
        outputs=[_where(o) for o in outputs],
        output=_where(y_hat),
        steps=steps,
        threads=spans,
    )
    return y_hat, trace


def _box(ax, x: float, y: float, h: float, text: str, color: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x - 0.42, y - h / 2),
            0.84,
            h,
            boxstyle="round,pad=0.02",
            facecolor=color,
            alpha=0.25,
            edgecolor=color,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=8)


def plot_forward(trace: ForwardTrace, title: str | None = None):
    """Top: the four steps as a flow, with shapes and devices; below: when each ran.

    The timeline has one row per thread: the calling thread's four steps,
    then each replica's call in its own thread (times in milliseconds since
    the call began). Returns the figure.
    """
    k = len(trace.chunks)
    fig, (flow, clock) = figure(
        9.0, 1.3 * k + 3.2, nrows=2, gridspec_kw={"height_ratios": [1.3 * k, 2.0]}
    )
    shape = lambda s: "(" + ", ".join(map(str, s)) + ")"  # noqa: E731
    _box(flow, 0, (k - 1) / 2, k - 0.3, f"X\n{shape(trace.input[0])}\non {trace.input[1]}", "grey")
    _box(
        flow,
        4,
        (k - 1) / 2,
        k - 0.3,
        f"output\n{shape(trace.output[0])}\non {trace.output[1]}",
        "grey",
    )
    for i in range(k):
        c = rank_color(i)
        (cs, cd), (rd, view), (os_, od) = trace.chunks[i], trace.replicas[i], trace.outputs[i]
        how = "views net's tensors" if view else "copies of net's"
        _box(flow, 1, i, 0.8, f"chunk {i}\n{shape(cs)}\non {cd}", c)
        _box(flow, 2, i, 0.8, f"replica {i}\non {rd}\n{how}", c)
        _box(
            flow,
            3,
            i,
            0.8,
            f"{trace.threads[i][0]}\nreplica {i}(chunk {i})\n-> {shape(os_)} on {od}",
            c,
        )
        for x in (0, 1, 2, 3):
            flow.annotate(
                "",
                xy=(x + 0.58, i),
                xytext=(x + 0.42, i),
                arrowprops=dict(arrowstyle="->", color="black"),
            )
    flow.set_xlim(-0.5, 4.5)
    flow.set_ylim(k - 0.4, -0.6)
    flow.set_xticks(
        range(5), ["input", "1. scatter", "2. replicate", "3. parallel_apply", "4. gather"]
    )
    flow.xaxis.tick_top()
    flow.set_yticks([])
    for side in flow.spines.values():
        side.set_visible(False)
    ms, total = 1e3, max(end for _, _, end in trace.steps)
    shades = ["#c7c7c7", "#8c8c8c", "#e5e5e5", "#525252"]
    for (name, start, end), shade in zip(trace.steps, shades):
        clock.barh(
            0, (end - start) * ms, left=start * ms, color=shade, edgecolor="black", label=name
        )
        if end - start > 0.15 * total:
            clock.text((start + end) / 2 * ms, 0, name, ha="center", va="center", fontsize=7)
    for i, (_, start, end) in enumerate(trace.threads):
        clock.barh(i + 1, (end - start) * ms, left=start * ms, color=rank_color(i))
    clock.set_yticks(
        range(k + 1), ["calling thread"] + [n for n, _, _ in trace.threads], fontsize=7.5
    )
    clock.invert_yaxis()
    clock.set_xlim(0, total * ms * 1.02)
    clock.legend(
        fontsize=7,
        ncol=4,
        loc="lower left",
        bbox_to_anchor=(0, 1.0),
        frameon=False,
        title="the calling thread's steps:",
        title_fontsize=7,
        alignment="left",
    )
    clock.set_xlabel("milliseconds since the forward call began (measured in this run)")
    clock.grid(axis="x", alpha=0.3)
    fig.suptitle(title or "one forward call of DataParallelByHand", fontsize=10)
    fig.tight_layout()
    return fig
