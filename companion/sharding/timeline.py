"""ZeRO-3's step on a timeline: when each unit was gathered, waited for, reduce-scattered.

Used in: chapter 9.

:class:`TimedZero3` is :class:`~.zero3.Zero3` that notes, while its ``timeline`` is a
list, each gather and reduce-scatter from its launch until its future completed, and
each time the step *waited* for a unit to be whole: the instrumentation lives here,
and the taught class stays as it is. :func:`record_zero3_step` runs one step so, after
a few untimed ones, and adds the step's phases
(chapter 6's :func:`~companion.internals.timeline.overlap` reads them).
Without prefetch every gather starts when its unit is needed, and the
step waits for all of it; with prefetch the next unit's gather runs
while the current one computes, and only what is left shows as a wait.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.nn import functional as F

from ..core.checks import check_int
from ..core.devices import synchronize
from ..core.training import set_seed
from ..internals.timeline import PHASES, Event
from ..runtime.group import rank_device
from .measure import divisible_mlp
from .zero3 import Zero3

__all__ = ["TimedZero3", "record_zero3_step", "waited", "plot_zero3_timeline"]


class TimedZero3(Zero3):
    """:class:`~.zero3.Zero3` that notes its collectives and waits in ``self.timeline``
    (a list of ``(label, start, end)``; ``None``, the default, notes nothing)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeline: list[Event] | None = None
        self._unfinished = {}  # work -> its end, noted when step() waits for it

    def _note(self, label: str, work, start: float) -> None:
        """``label`` runs from ``start`` until ``work``'s future completes (gloo's
        reduce-scatter has no future: its end is then when ``step()`` waits for it)."""
        if self.timeline is None or work is None:
            return

        def end(_=None) -> None:
            self.timeline.append((label, start, time.perf_counter()))

        try:
            work.get_future().then(end)
        except RuntimeError:
            self._unfinished[work] = end

    def _gather(self, unit):
        start = time.perf_counter()
        work = super()._gather(unit)
        self._note(f"gather {unit.name}", work, start)
        return work

    def _use(self, unit) -> None:
        self._gather(unit)
        start = time.perf_counter()
        unit.wait()
        if self.timeline is not None:
            self.timeline.append((f"wait {unit.name}", start, time.perf_counter()))

    def _reduce_scatter(self, unit):
        start = time.perf_counter()
        work = super()._reduce_scatter(unit)
        self._note(f"reduce-scatter {unit.name}", work, start)
        return work

    def _reduced(self, unit) -> torch.Tensor:
        for work, _ in unit.pending:
            if work in self._unfinished:  # no future: it ends when waited for
                work.wait()
                self._unfinished.pop(work)()
        return super()._reduced(unit)


def record_zero3_step(
    rank: int,
    world_size: int,
    prefetch: bool,
    width: int = 96,
    depth: int = 6,
    batch: int = 32,
    warmup: int = 3,
) -> list[Event]:
    """Worker: the events of one ZeRO-3 step on this rank (seconds from its start)."""
    check_int(warmup, "warmup", 0)
    device = rank_device()
    set_seed(0)
    net = divisible_mlp(width, depth).to(device)
    opt = TimedZero3(net, torch.optim.Adam, prefetch=prefetch, lr=1e-3)
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 12, (batch,), device=device)
    for record in [False] * warmup + [True]:
        opt.timeline = [] if record else None
        dist.barrier()
        marks = [time.perf_counter()]
        loss = F.cross_entropy(net(X), y)
        for phase in (loss.backward, lambda: None, opt.step, opt.zero_grad):
            synchronize(device)
            marks.append(time.perf_counter())
            phase()
    dist.barrier()  # the futures' callbacks have run by now
    t0, events = marks[0], opt.timeline
    events += [(name, marks[i], marks[i + 1]) for i, name in enumerate(PHASES) if name != "finish"]
    return sorted((label, s - t0, e - t0) for label, s, e in events)


def waited(events: Sequence[Event]) -> float:
    """Seconds the step spent waiting for units to be whole."""
    return sum(e - s for label, s, e in events if label.startswith("wait "))


def plot_zero3_timeline(timelines: dict[str, Sequence[Event]], title: str = ""):
    """One panel per run: compute phases, waits (black), gathers and reduce-scatters."""
    import matplotlib.pyplot as plt

    if not timelines:
        raise ValueError("give at least one run's events, e.g. {'no prefetch': events}")
    fig, axes = plt.subplots(
        len(timelines), 1, figsize=(9.0, 1.6 + 1.5 * len(timelines)), sharex=True, squeeze=False
    )
    colors = {
        "forward": "C0",
        "backward": "C1",
        "optimizer": "C2",
        "gather": "C4",
        "reduce-scatter": "C3",
        "wait": "k",
    }
    for ax, (name, events) in zip(axes[:, 0], timelines.items()):
        comm = [
            (label, s, e)
            for label, s, e in events
            if label.split()[0] in ("gather", "reduce-scatter")
        ]
        lane = 0.8 / max(1, len(comm))
        for label, s, e in events:
            kind = label.split()[0]
            if label in PHASES:
                ax.broken_barh(
                    [(s * 1e3, (e - s) * 1e3)], (1.1, 0.8), color=colors[label], label=label
                )
            elif kind == "wait":
                ax.broken_barh(
                    [(s * 1e3, (e - s) * 1e3)], (1.1, 0.25), color="k", label="waiting for a gather"
                )
        for i, (label, s, e) in enumerate(sorted(comm, key=lambda c: c[1])):
            kind = label.split()[0]
            ax.broken_barh(
                [(s * 1e3, (e - s) * 1e3)],
                (0.1 + i * lane, lane * 0.9),
                color=colors[kind],
                label=kind if kind == "gather" else "reduce-scatter (ends: waited in step)",
            )
        ax.set(yticks=[0.5, 1.5], yticklabels=["communication", "compute"])
        ax.set_title(name, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    handles = {h.get_label(): h for ax in axes[:, 0] for h in ax.get_legend_handles_labels()[0]}
    fig.legend(
        list(handles.values()), list(handles), loc="lower center", ncol=6, fontsize=8, frameon=False
    )
    axes[-1, 0].set_xlabel("milliseconds from the start of the step")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
