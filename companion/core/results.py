"""Results: one record per (method, device count, epoch), a table, and the scaling plot.

Used in: every chapter. Every training function of the package returns a
list of :class:`Record`; :func:`plot_scaling` draws any such list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from statistics import mean

from .devices import hardware_label
from .figures import headroom, legend_below
from .files import atomic_write
from .noise import CPU_SHARE_QUIET

__all__ = [
    "CPU_SHARE_QUIET",
    "VIRTUAL_NOTE",
    "Record",
    "record_maker",
    "save_records",
    "load_records",
    "final_accuracy",
    "summarize",
    "plot_scaling",
]


@dataclass
class Record:
    """What one epoch of a method on ``n_devices`` devices gave, with its hardware."""

    method: str
    n_devices: int
    epoch: int
    test_acc: float
    sec_per_epoch: float
    samples_per_sec: float
    train_loss: float
    hardware: str
    profile: str
    model: str = ""
    dataset: str = ""
    precision: str = "fp32"  # and memory layout, e.g. "bf16, channels_last"
    cpu_share: float | None = None  # one process on a CPU (see Timer); below CPU_SHARE_QUIET: busy
    virtual: bool = False  # n_devices named on fewer (core.devices.is_virtual): no speed-up


def record_maker(
    method: str,
    n_devices: int,
    *,
    profile: str,
    model: str,
    dataset: str,
    precision: str,
    virtual: bool = False,
) -> Callable[..., Record]:
    """``record(epoch, test_acc, seconds=..., samples=..., loss=..., cpu_share=...)``: one
    epoch's :class:`Record` of a run labelled once, here (``samples``: those trained on)."""

    def record(
        epoch: int,
        test_acc: float,
        *,
        seconds: float,
        samples: int,
        loss: float,
        cpu_share: float | None = None,
    ) -> Record:
        return Record(
            method=method,
            n_devices=n_devices,
            epoch=epoch,
            test_acc=test_acc,
            sec_per_epoch=seconds,
            samples_per_sec=samples / seconds,
            train_loss=loss,
            hardware=hardware_label(),
            profile=profile,
            model=model,
            dataset=dataset,
            precision=precision,
            cpu_share=cpu_share,
            virtual=virtual,
        )

    return record


def save_records(records: Iterable[Record], path: str | Path) -> Path:
    """Write records as JSON, atomically (see :func:`~companion.core.files.atomic_write`)."""
    rows = [asdict(_check_record(r)) for r in records]
    return atomic_write(path, lambda f: json.dump(rows, f, indent=1), binary=False)


def load_records(path: str | Path) -> list[Record]:
    """Read records written by :func:`save_records`."""
    names = {f.name for f in fields(Record)}
    try:
        with open(path) as f:
            rows = json.load(f)
        return [Record(**{k: v for k, v in row.items() if k in names}) for row in rows]
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, AttributeError) as err:
        raise ValueError(
            f"{path} is not a records file ({type(err).__name__}: {err}); give a "
            f"file written by save_records"
        ) from err


def _by_run(records: Sequence[Record]) -> dict[tuple[str, int], list[Record]]:
    runs: dict[tuple[str, int], list[Record]] = {}
    for r in records:
        runs.setdefault((r.method, r.n_devices), []).append(r)
    return runs


def _throughput(runs: Sequence[Record]) -> float:
    """Samples per second over several epochs: all samples over all seconds."""
    return sum(r.samples_per_sec * r.sec_per_epoch for r in runs) / sum(
        r.sec_per_epoch for r in runs
    )


def final_accuracy(runs: Sequence[Record]) -> tuple[float, float, float, int]:
    """``(mean, lowest, highest, k)`` test accuracy over a run's last ``k`` epochs.

    ``k`` is half the epochs, rounded up. One epoch's accuracy on a small test
    set moves by points from one epoch to the next; the mean of the last
    epochs, with its range, does not turn that noise into a trend.
    """
    if not runs:
        raise ValueError("final_accuracy needs at least one record: give a run's records")
    last = sorted(runs, key=lambda r: r.epoch)[-max(1, -(-len(runs) // 2)) :]
    accs = [r.test_acc for r in last]
    return mean(accs), min(accs), max(accs), len(accs)


VIRTUAL_NOTE = "v: virtual devices (the CPU, or a GPU named again): same results, no speed-up"


def _virtual_counts(records: Sequence[Record]) -> set[int]:
    return {r.n_devices for r in records if r.virtual}


def summarize(records: Sequence[Record]) -> str:
    """A table per method and device count: final accuracy, mean s/epoch, samples/s.

    The accuracy is :func:`final_accuracy`: the mean over the last half of
    the epochs, with the lowest and highest of them. A ``v`` marks virtual devices.
    """
    if not records:
        raise ValueError("summarize needs at least one record; train something first")
    runs = _by_run(records)
    width = max([len("method")] + [len(m) for m, _ in runs])
    lines = [
        f"{'method':<{width}} {'devices':>7} {'epochs':>6} {'test acc':>8} "
        f"{'(range)':>13} {'s/epoch':>8} {'samples/s':>10}"
    ]
    ks, shares = set(), []
    for (method, n), run in runs.items():
        acc, low, high, k = final_accuracy(run)
        ks.add(k)
        measured = [r.cpu_share for r in run if r.cpu_share is not None]
        busy = bool(measured) and mean(measured) < CPU_SHARE_QUIET
        shares += [mean(measured)] if busy else []
        devices = f"{n}{'v' if any(r.virtual for r in run) else ''}"
        lines.append(
            f"{method:<{width}} {devices:>7} {len(run):>6} {acc:>8.3f} "
            f"{f'({low:.3f}-{high:.3f})' if k > 1 else '(one epoch)':>13} "
            f"{mean(r.sec_per_epoch for r in run):>8.3f} {_throughput(run):>10,.0f}"
            + (" *" if busy else "")
        )
    last = " or ".join(map(str, sorted(ks)))
    lines.append(f"test acc: mean of the last {last} epoch(s), and their range")
    if any(r.virtual for r in records):
        lines.append(VIRTUAL_NOTE)
    if shares:
        lines.append(
            f"* busy: its threads got a core for only {min(shares):.0%} of the time they were "
            f"ready to run\n  (on a quiet machine about 100%): other work inflated its s/epoch; "
            f"re-measure on a quiet machine"
        )
    labels = sorted({f"{r.hardware}, profile {r.profile}, {r.precision}" for r in records})
    lines.append("measured on: " + "; ".join(labels))
    return "\n".join(lines)


def plot_scaling(
    records: Sequence[Record],
    device_counts: Sequence[int] | None = None,
    title: str | None = None,
    min_acc_span: float = 0.2,
):
    """Two panels against device count: final test accuracy, and seconds per epoch.

    One line per method, each with its own marker and dash, drawn a little
    apart, so that methods with equal results stay visible. Accuracy is
    :func:`final_accuracy` (the mean of the last half of the epochs, with a
    bar over their range); seconds per epoch is the mean over all epochs,
    with a bar from the fastest to the slowest epoch. The accuracy
    axis spans at least ``min_acc_span``, so that tiny differences are not
    blown up into a steep-looking plot, and stays within [0, 1.01].
    ``device_counts`` fixes the x axis (e.g. ``(1, 2, 4)`` before any
    multi-device result exists). The title names the hardware and profile of
    the records; the ticks of virtual device counts say "virtual". Returns the figure.
    """
    import matplotlib.pyplot as plt

    if not records:
        raise ValueError("plot_scaling needs at least one record")
    runs = _by_run(records)
    counts = sorted(set(device_counts or ()) | {n for _, n in runs})
    fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(9, 3.4))
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
    methods = list(dict.fromkeys(m for m, _ in runs))
    for i, method in enumerate(methods):
        marker, dash = styles[i % len(styles)]
        ns = sorted(n for m, n in runs if m == method)
        xs = [n + 0.08 * (i - (len(methods) - 1) / 2) for n in ns]  # side by side
        finals = [final_accuracy(runs[method, n]) for n in ns]
        secs = [[r.sec_per_epoch for r in runs[method, n]] for n in ns]
        means = [mean(s) for s in secs]
        style = dict(marker=marker, linestyle=dash, label=method, capsize=3)
        ax_acc.errorbar(
            xs,
            [f[0] for f in finals],
            yerr=[[f[0] - f[1] for f in finals], [f[2] - f[0] for f in finals]],
            **style,
        )
        ax_time.errorbar(
            xs,
            means,
            yerr=[
                [m - min(s) for m, s in zip(means, secs)],
                [max(s) - m for m, s in zip(means, secs)],
            ],
            **style,
        )
    virtual = _virtual_counts(records)
    for ax, ylabel in (
        (ax_acc, "test accuracy\n(mean of the last epochs)"),
        (ax_time, "seconds per epoch"),
    ):
        ax.set_xticks(counts, [f"{n}\n(virtual)" if n in virtual else str(n) for n in counts])
        ax.set_xlim(min(counts) - 0.5, max(counts) + 0.5)
        ax.set_xlabel("number of devices")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    headroom(ax_time)
    low, high = ax_acc.get_ylim()
    span = min(max(high - low, min_acc_span), 1.02)
    low = min(max(0.0, (low + high - span) / 2), 1.01 - span)
    ax_acc.set_ylim(low, low + span)
    labels = sorted({f"{r.hardware}, profile '{r.profile}', {r.precision}" for r in records})
    fig.suptitle(title or "; ".join(labels), fontsize=10)
    legend_below(fig, ax_acc)
    return fig


def _check_record(r):
    if not isinstance(r, Record):
        raise TypeError(
            f"records must hold companion.core.Record objects, got {type(r).__name__}: "
            f"save what train() or the chapters' trainers return"
        )
    return r
