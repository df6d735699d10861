"""Chapters 1 and 7: measure the one-device numbers once and keep them, labelled, in a file.

``python -m companion_tools.bench record --out FILE`` runs chapter 1's loop
benchmark and the fast baseline (ours against d2l's loop) in one run and
writes one JSON file holding both with what they were measured on: the
hardware, torch and CUDA versions, the profile, data set, precision and the
date. The book's GPU figures are read from such files, shipped with the
package in ``companion_tools/bench/results/`` (a Colab reader has them too):
:func:`committed` returns the record and chapter 7's study measured in the
same session, :func:`load_record` checks that a record carries its labels,
and :func:`plot_record` draws one.
"""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import torch

from companion.core.data import load_data
from companion.core.devices import hardware_label
from companion.core.files import atomic_write
from companion.core.profiles import get_profile

from . import baseline, bench_parser, loop

LABELS = ("hardware", "torch", "cuda", "python", "profile", "dataset", "date")
RESULTS = resources.files(__package__) / "results"  # package data: the committed measurements
MEASURED = "h200"  # RESULTS holds <name>-record.json and <name>-study.json


def environment(profile) -> dict:
    """What a number needs next to it: where, with which software, on which data."""
    return dict(
        hardware=hardware_label(),
        torch=torch.__version__,
        cuda=torch.version.cuda or "none",
        python=platform.python_version(),
        profile=profile.name,
        dataset=load_data(profile, verbose=False).name,
        date=datetime.now(UTC).strftime("%Y-%m-%d"),
    )


def measure(profile: str | None = None, rounds: int = 3, out: str | None = None) -> dict:
    """The loop benchmark and the baseline under ``profile``, with their labels."""
    chosen = get_profile(profile)
    seen = environment(chosen)
    loops = loop.measure(chosen, rounds=rounds)
    seen["loop"] = {
        name: {"sec_per_epoch": s, "loop_efficiency": e.median} for name, (s, e) in loops.items()
    }
    seen["baseline"] = baseline.measure(chosen, rounds=rounds)
    if out is not None:
        atomic_write(out, lambda f: json.dump(seen, f, indent=1), binary=False)
    return seen


def report(seen: dict) -> str:
    """The file's numbers as the two benchmarks print them."""
    loops = {name: (v["sec_per_epoch"], v["loop_efficiency"]) for name, v in seen["loop"].items()}
    return "\n".join([loop.report(loops), baseline.report(seen["baseline"])])


def load_record(path: str | Path) -> dict:
    """A file written by :func:`measure`; ``ValueError`` naming what is missing otherwise."""
    try:
        seen = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} is not a benchmark record ({type(err).__name__}: {err}): "
            f"write one with python -m companion_tools.bench record --out {path}"
        ) from None
    missing = [
        k for k in (*LABELS, "loop", "baseline") if not isinstance(seen, dict) or not seen.get(k)
    ]
    if missing:
        raise ValueError(
            f"{path} lacks {', '.join(missing)}: a number without its labels "
            f"cannot be shown; re-run python -m companion_tools.bench record --out {path}"
        )
    return seen


def committed(name: str = MEASURED) -> tuple[dict, list]:
    """The record and the study (:class:`~companion.study.driver.StudyRecord` list) measured
    in one session on the machine ``name``, as shipped in ``RESULTS``."""
    from companion.study.driver import load_study

    known = sorted(
        p.name[: -len("-record.json")] for p in RESULTS.iterdir() if p.name.endswith("-record.json")
    )
    if name not in known:
        raise ValueError(f"no committed measurements named {name!r}; there are: {', '.join(known)}")
    return load_record(RESULTS / f"{name}-record.json"), load_study(RESULTS / f"{name}-study.json")


def label(seen: dict) -> str:
    """The line that goes under every number of a record: where, with what, when."""
    return (
        f"measured on {seen['hardware']}, torch {seen['torch']}, CUDA {seen['cuda']}, "
        f"profile '{seen['profile']}', {seen['dataset'].split(' (')[0]} data, {seen['date']}"
    )


def plot_record(seen: dict):
    """Seconds per epoch of the four loops of a record, one bar each, labelled; the figure."""
    import matplotlib.pyplot as plt

    base = seen["baseline"]
    bars = {
        "DataLoader loop\n(fp32)": seen["loop"]["DataLoader"]["sec_per_epoch"],
        "device-resident\n(fp32)": seen["loop"]["device-resident"]["sec_per_epoch"],
        f"d2l's loop\n({base['workers']} workers, fp32)": base["median"]["d2l's loop"],
        f"companion\n({base['math']})": base["median"]["companion"],
    }
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    ax.barh(list(bars), list(bars.values()), color=["0.6", "0.45", "tab:orange", "tab:blue"])
    for y, value in enumerate(bars.values()):
        ax.text(value, y, f" {value:.2f} s", va="center")
    ax.invert_yaxis()
    ax.set_xlabel(
        f"seconds per epoch ({base['model']}, {base['samples']:,} images, "
        f"batch {base['batch']}; lower is better)"
    )
    ax.set_xlim(0, max(bars.values()) * 1.18)
    ax.set_title(label(seen), fontsize=8)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("record", __doc__, profile=None, rounds=3)
    parser.add_argument("--out", default=None, help="write the record (JSON) here")
    options = vars(parser.parse_args(argv))
    seen = measure(**options)
    print(
        f"{seen['hardware']}; torch {seen['torch']}, CUDA {seen['cuda']}; profile "
        f"'{seen['profile']}', {seen['dataset']}; {seen['date']}"
    )
    print(report(seen))
    return 0
