"""When each all-reduce ran: the hooks' timestamps of one step, drawn as a timeline.

Used in: chapter 6.

:func:`recording` notes, from outside the chapter's wrappers, each gradient
that became ready and each all-reduce, from its launch to the moment its
future completed. :func:`record_step` runs one training step so, after a few
untimed ones, and adds the phases of the step (forward, backward, waiting in
``finish()``, the optimizer). :func:`plot_timeline` draws one panel per
variant: compute above, communication below. Overlap is an all-reduce bar
that lies under the backward bar. Times are the host's clock; on a GPU the
device is synchronised around each phase.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial

import torch
import torch.distributed as dist
from torch.nn import functional as F

from ..core.checks import check_choice, check_int
from ..core.devices import synchronize
from ..core.training import set_seed
from ..runtime.group import rank_device
from .naive import NaiveDDP, trainable_parameters
from .sweep import get_bench_model
from .training import wrap

__all__ = ["Event", "record_step", "recording", "overlap", "plot_timeline"]

Event = tuple[str, float, float]  # (label, start, end) in seconds from the step's start
PHASES = ("forward", "backward", "finish", "optimizer")


def _check_record(variant: str, warmup: int) -> None:
    check_choice(variant, "variant", ("NaiveDDP", "HookedDDP", "BucketedDDP"))
    check_int(warmup, "warmup", 0)


def record_step(
    rank: int,
    world_size: int,
    variant: str,
    model: str = "lenet",
    batch: int = 32,
    bucket_cap_mb: float = 25.0,
    warmup: int = 3,
) -> list[Event]:
    """Worker: the events of one training step of ``variant`` on this rank."""
    _check_record(variant, warmup)
    device = rank_device()
    set_seed(0)
    # finish() called by hand (the wrappers' fallback), so its wait is a phase of its own
    net = wrap(get_bench_model(model).to(device), variant, bucket_cap_mb, finish_in_backward=False)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    X = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    for record in [False] * warmup + [True]:
        events: list[Event] = []
        dist.barrier()
        with recording(net, events) if record else nullcontext():
            marks = [time.perf_counter()]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(X), y)
            for phase in (loss.backward, net.finish, opt.step, lambda: None):
                synchronize(device)
                marks.append(time.perf_counter())
                phase()
    dist.barrier()  # the futures' callbacks have run by now
    t0 = marks[0]
    events += [(name, marks[i], marks[i + 1]) for i, name in enumerate(PHASES)]
    if variant == "NaiveDDP":  # its one blocking average_gradients call is the finish phase
        events.append(("average_gradients", marks[2], marks[3]))
    return sorted((label, s - t0, e - t0) for label, s, e in events)


@contextmanager
def recording(net: NaiveDDP, events: list[Event]) -> Iterator[None]:
    """Note each gradient that becomes ready and each async all-reduce, from launch to done.

    Instrumentation from outside the wrapper: one more gradient hook per
    parameter (it runs right after the wrapper's; none for ``NaiveDDP``) and, while the block runs,
    a ``dist.all_reduce`` that notes when each asynchronous call started and
    when its future completed, labelled by the tensor it reduces.
    """
    labels = {id(b.buffer): f"bucket {i}" for i, b in enumerate(getattr(net, "buckets", []))}
    params = trainable_parameters(net.module)
    all_reduce = dist.all_reduce

    def timed(tensor, *args, **kwargs):
        start, work = time.perf_counter(), all_reduce(tensor, *args, **kwargs)
        label = labels.get(id(tensor)) or next((n for n, p in params if p.grad is tensor), None)
        if work is not None and label is not None:
            work.get_future().then(lambda _: events.append((label, start, time.perf_counter())))
        return work

    def ready(name: str, p) -> None:
        now = time.perf_counter()
        events.append((f"{name} ready", now, now))

    acts = type(net) is not NaiveDDP  # NaiveDDP acts on no single gradient: no ticks
    handles = [p.register_post_accumulate_grad_hook(partial(ready, n)) for n, p in params if acts]
    dist.all_reduce = timed
    try:
        yield
    finally:
        dist.all_reduce = all_reduce
        for handle in handles:
            handle.remove()


def overlap(events: Sequence[Event]) -> tuple[float, float]:
    """``(seconds of all-reduce, of which under the backward pass)``."""
    backward = [(s, e) for label, s, e in events if label == "backward"]
    if not backward:
        raise ValueError("no 'backward' event: give the events of record_step")
    b_start, b_end = backward[0]
    total = hidden = 0.0
    for label, s, e in events:
        if label not in PHASES and not label.endswith(" ready"):
            total += e - s
            hidden += max(0.0, min(e, b_end) - max(s, b_start))
    return total, hidden


def plot_timeline(timelines: dict[str, Sequence[Event]], title: str = ""):
    """One panel per variant: the step's phases, gradients ready (ticks), all-reduces."""
    import matplotlib.pyplot as plt

    if not timelines:
        raise ValueError("give at least one variant's events")
    fig, axes = plt.subplots(
        len(timelines), 1, figsize=(9.0, 1.5 + 1.3 * len(timelines)), sharex=True, squeeze=False
    )
    colors = dict(zip(PHASES, ("C0", "C1", "C7", "C2")))
    for ax, (variant, events) in zip(axes[:, 0], timelines.items()):
        comm = sorted(
            (s, e) for label, s, e in events if label not in PHASES and " ready" not in label
        )
        for label, s, e in events:
            ms = (s * 1e3, (e - s) * 1e3)
            if label in PHASES:
                ax.broken_barh([ms], (1.1, 0.8), color=colors[label], label=label)
            elif label.endswith(" ready"):
                ax.plot([s * 1e3] * 2, [1.0, 1.95], color="k", lw=0.6)
        lane = 0.8 / max(1, len(comm))  # one lane per all-reduce: concurrency shows
        for i, (s, e) in enumerate(comm):
            ax.broken_barh(
                [(s * 1e3, (e - s) * 1e3)],
                (0.1 + i * lane, lane * 0.9),
                color="C3",
                label="all-reduce (one lane each)" if i == 0 else None,
            )
        ax.set(yticks=[0.5, 1.5], yticklabels=["communication", "compute"])
        ax.set_title(variant, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    handles = {h.get_label(): h for ax in axes[:, 0] for h in ax.get_legend_handles_labels()[0]}
    order = [k for k in (*PHASES, "all-reduce (one lane each)") if k in handles]
    fig.legend(
        [handles[k] for k in order], order, loc="lower center", ncol=5, fontsize=8, frameon=False
    )
    axes[-1, 0].set_xlabel("milliseconds from the start of the step (ticks: gradient ready)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
