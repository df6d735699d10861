"""Chapter 2's step drawn: the minibatch's rows by device, the gradients summed.

Used in: chapter 2.

:func:`trace_step` runs one real :func:`~companion.split.naive.train_batch`
and records what it did through the phases that function takes as
arguments: the shards that ``forward_backward`` received (which rows of the
minibatch, on which device) and one parameter's gradient on every replica
before and after ``allreduce_grads``. Nothing in ``companion.split`` changes;
without the recording phases, the step is the chapter's own.
:func:`plot_step` draws the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from companion.split.naive import allreduce_grads, forward_backward, train_batch

from .style import figure, rank_color, text_color

__all__ = ["SplitTrace", "trace_step", "plot_step"]


class SplitTrace(NamedTuple):
    """One data-parallel step of chapter 2, as :func:`trace_step` saw it."""

    batch_size: int
    devices: list[str]  # the device of each shard
    rows: list[tuple[int, int]]  # (start, stop): the rows of the minibatch in each shard
    labels: list[list[int]]  # each shard's labels
    param: str  # the parameter whose gradients are recorded
    before: list[list[float]]  # each replica's gradient of it after its own backward
    after: list[list[float]]  # ... and after the all-reduce
    loss: float  # the step's mean loss, as train_batch returns it


def trace_step(
    X: torch.Tensor,
    y: torch.Tensor,
    replicas: Sequence[nn.Module],
    devices: Sequence[torch.device],
    lr: float,
    param: str | None = None,
) -> SplitTrace:
    """Take one step of ``train_batch`` (replicas updated) and record it.

    ``param`` names the parameter to follow (``replicas[0].named_parameters()``);
    the default is the last one, e.g. the output layer's bias.
    """
    names = [name for name, _ in replicas[0].named_parameters()]
    param = names[-1] if param is None else param
    if param not in names:
        raise ValueError(f"the model has no parameter {param!r}; choose from {names}")
    seen: dict = {}

    def recording_forward_backward(replicas, X_shards, y_shards, batch_size, loss):
        seen["shards"] = [
            (len(X_i), str(X_i.device), y_i.tolist()) for X_i, y_i in zip(X_shards, y_shards)
        ]
        return forward_backward(replicas, X_shards, y_shards, batch_size, loss)

    def grads(replicas) -> list[list[float]]:
        return [dict(net.named_parameters())[param].grad.flatten().tolist() for net in replicas]

    def recording_allreduce_grads(replicas):
        seen["before"] = grads(replicas)
        allreduce_grads(replicas)
        seen["after"] = grads(replicas)

    loss = train_batch(
        X,
        y,
        replicas,
        devices,
        lr,
        forward_backward=recording_forward_backward,
        allreduce_grads=recording_allreduce_grads,
    )
    sizes = [n for n, _, _ in seen["shards"]]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return SplitTrace(
        batch_size=len(y),
        devices=[d for _, d, _ in seen["shards"]],
        rows=[(a, a + n) for a, n in zip(starts, sizes)],
        labels=[labels for _, _, labels in seen["shards"]],
        param=param,
        before=seen["before"],
        after=seen["after"],
        loss=float(loss),
    )


def plot_step(trace: SplitTrace, title: str | None = None):
    """Top: the minibatch's rows coloured by shard; below: the gradients, summed.

    The top strip has one cell per row of the minibatch, labelled with the
    row's class. The heat map below has one row per replica's gradient of
    ``trace.param`` before the all-reduce, their sum, and each replica's
    gradient after it: the sum, written back. Returns the figure.
    """
    k, n = len(trace.devices), trace.batch_size
    fig, (top, bottom) = figure(
        9.0,
        1.6 + 0.42 * (2 * k + 1) + 0.9,
        nrows=2,
        gridspec_kw={"height_ratios": [1.4, 0.42 * (2 * k + 1)]},
    )
    for i, ((a, b), device, labels) in enumerate(zip(trace.rows, trace.devices, trace.labels)):
        top.barh(0, b - a, left=a, height=0.8, color=rank_color(i), edgecolor="white")
        for row, label in zip(range(a, b), labels):
            top.text(row + 0.5, 0, str(label), ha="center", va="center", fontsize=7, color="white")
        top.text(
            (a + b) / 2,
            0.55,
            f"shard {i}: {b - a} rows\n-> {device}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    top.set_xlim(0, n)
    top.set_ylim(-0.5, 1.6)
    top.set_yticks([])
    top.set_xlabel(f"row of the minibatch (the numbers are the labels y); {n} rows, {k} shards")
    for side in ("left", "right", "top"):
        top.spines[side].set_visible(False)
    total = [sum(column) for column in zip(*trace.before)]
    grid = trace.before + [total] + trace.after
    names = (
        [f"replica {i} before" for i in range(k)]
        + ["sum"]
        + [f"replica {i} after" for i in range(k)]
    )
    limit = max(abs(v) for row in grid for v in row) or 1.0
    image = bottom.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    width = len(grid[0])
    if width <= 16:
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                fill = image.cmap(image.norm(v))
                bottom.text(
                    c, r, f"{v:.3f}", ha="center", va="center", fontsize=7, color=text_color(fill)
                )
    bottom.axhline(k - 0.5, color="black", linewidth=1)
    bottom.axhline(k + 0.5, color="black", linewidth=1)
    bottom.set_yticks(range(len(names)), names, fontsize=8)
    bottom.set_xlabel(f"entry of the gradient of parameter {trace.param!r}")
    fig.colorbar(image, ax=bottom, label="gradient", fraction=0.04, pad=0.02)
    fig.suptitle(title or "one step of chapter 2: split the batch, sum the gradients", fontsize=10)
    fig.tight_layout()
    return fig
