"""The scaling study: methods x device counts x seeds, saved with its hardware.

Used in: chapter 7.

:func:`plan` lists the runs of a study: for each method, device count and
seed, the global batch and learning rate that the scaling mode gives.

* ``strong`` scaling keeps the global batch: each of ``k`` devices gets
  ``batch / k`` samples per step, and the run computes the same thing as one
  device (same steps, same lr); only the time may change.
* ``weak`` scaling keeps the per-device batch: the global batch is ``k x
  batch``, there are ``k`` times fewer steps per epoch, and the learning rate
  follows ``lr_rule`` (:data:`~companion.core.lr.LR_RULES`).

:func:`run_study` trains every run from a fresh model and returns one
:class:`StudyRecord` per run and epoch; :func:`save_study` writes them to a
CSV file and a JSON file (with the hardware and profile) atomically, and
:func:`load_study` reads either back, so results are plotted without
re-running.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from ..core.checks import check_choice, check_data, check_distinct, check_int
from ..core.data import Data, ImageSet
from ..core.devices import hardware_label
from ..core.files import atomic_write
from ..core.lines import say
from ..core.lr import LR_RULES, scaled_lr
from ..core.results import Record
from .methods import METHODS, Method, RunSpec, run_method

__all__ = ["SCALING", "StudyRecord", "load_study", "plan", "run_study", "save_study", "subset"]

SCALING = ("strong", "weak")


@dataclass
class StudyRecord(Record):
    """A :class:`Record` with the run it came from."""

    seed: int = 0
    scaling: str = "strong"
    global_batch: int = 0
    lr: float = 0.0
    lr_rule: str = "none"


def plan(
    methods: Sequence[str],
    device_counts: Sequence[int],
    seeds: Sequence[int],
    *,
    data: Data,
    model: str,
    batch: int,
    lr: float,
    epochs: int,
    scaling: str = "strong",
    lr_rule: str = "none",
    profile: str = "ci",
    warmup_epochs: int = 1,
    precision: str = "fp32",
    catalog: Mapping[str, Method] = METHODS,
) -> list[tuple[str, RunSpec]]:
    """Every ``(method, RunSpec)`` of the study, method by method, then devices, seeds.

    ``warmup_epochs`` is the length of the warm-up of ``lr_rule="warmup"``;
    ``precision`` is every run's (one study, one precision: a method that
    cannot compute in it refuses); ``methods`` are names of ``catalog``.
    """
    _check_plan(methods, device_counts, seeds, scaling, lr_rule, data, catalog)
    runs = []
    for name in methods:
        for k in device_counts:
            global_batch = batch if scaling == "strong" else batch * k
            run_lr = scaled_lr(lr, k, lr_rule)
            for seed in seeds:
                spec = RunSpec(
                    data=data,
                    model=model,
                    n_devices=k,
                    global_batch=global_batch,
                    lr=run_lr,
                    epochs=epochs,
                    seed=seed,
                    profile=profile,
                    base_lr=lr,
                    lr_rule=lr_rule,
                    warmup_epochs=warmup_epochs,
                    precision=precision,
                )
                runs.append((name, spec))
    return runs


def _check_plan(methods, device_counts, seeds, scaling, lr_rule, data, catalog) -> None:
    check_data(data)
    check_choice(scaling, "scaling", SCALING)
    check_choice(lr_rule, "lr_rule", LR_RULES)
    if scaling == "strong" and lr_rule != "none":
        raise ValueError("strong scaling keeps the global batch, so keep lr_rule='none'")
    for name in methods:
        check_choice(name, "method", catalog)
    for k in device_counts:
        check_int(k, "device count")
    for seed in seeds:
        check_int(seed, "seed", 0)
    if not (methods and device_counts and seeds):
        raise ValueError("give at least one method, one device count and one seed")
    for values, name in ((methods, "methods"), (device_counts, "device_counts"), (seeds, "seeds")):
        check_distinct(values, name)  # a seed run twice would report a spread of 0


def run_study(
    runs: Sequence[tuple[str, RunSpec]],
    scaling: str = "strong",
    path: str | Path | None = None,
    progress: bool | None = None,
    log_lines: bool = False,
    catalog: Mapping[str, Method] = METHODS,
) -> list[StudyRecord]:
    """Train every run of :func:`plan` (its names are ``catalog``'s); save after each run when
    ``path`` is given.

    ``progress`` shows a tqdm bar on stderr; by default only when stderr is a
    terminal, so notebook outputs stay clean. ``log_lines`` writes one line to
    stderr per finished run instead (the command line, when stderr is a file or
    a pipe). Saving after every run means an interrupted study keeps what it
    finished.
    """
    from tqdm import tqdm

    check_choice(scaling, "scaling", SCALING)
    show_bar = sys.stderr.isatty() if progress is None else progress
    found: list[StudyRecord] = []
    with tqdm(total=len(runs), desc="scaling study", unit="run", disable=not show_bar) as bar:
        for i, (name, spec) in enumerate(runs, start=1):
            what = f"{name}, {spec.n_devices} device(s), seed {spec.seed}"
            bar.set_postfix_str(what)
            start = time.perf_counter()
            for r in run_method(name, spec, catalog):
                found.append(
                    StudyRecord(
                        **asdict(r),
                        seed=spec.seed,
                        scaling=scaling,
                        global_batch=spec.global_batch,
                        lr=spec.lr,
                        lr_rule=spec.lr_rule,
                    )
                )
            if path is not None:
                save_study(found, path)
            bar.update(1)
            if log_lines:
                say(
                    f"run {i}/{len(runs)} done: {what}, {time.perf_counter() - start:.1f} s",
                    file=sys.stderr,
                )
    return found


def save_study(records: Sequence[StudyRecord], path: str | Path) -> tuple[Path, Path]:
    """Write ``path`` as ``.csv`` and ``.json`` (hardware, profiles, records), atomically."""
    if not records:  # load_study would then read a study without rows
        raise ValueError("save_study needs at least one record: run a study first (run_study)")
    path = Path(path)
    rows = [asdict(r) for r in records]
    names = [f.name for f in fields(StudyRecord)]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    meta = {
        "hardware": sorted({r.hardware for r in records}) or [hardware_label()],
        "profiles": sorted({r.profile for r in records}),
        "torch": torch.__version__,
        "records": rows,
    }
    csv_path = atomic_write(
        path.with_suffix(".csv"), lambda f: f.write(text.getvalue()), binary=False
    )
    json_path = atomic_write(
        path.with_suffix(".json"), lambda f: json.dump(meta, f, indent=1), binary=False
    )
    return csv_path, json_path


def load_study(path: str | Path) -> list[StudyRecord]:
    """Read a study written by :func:`save_study`, from its ``.csv`` or ``.json`` file."""
    path = Path(path)
    types = {f.name: f.type for f in fields(StudyRecord)}
    try:
        if path.suffix == ".csv":
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        else:
            with open(path) as f:
                rows = json.load(f)["records"]
        return [StudyRecord(**{k: _typed(types[k], v) for k, v in row.items()}) for row in rows]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, AttributeError) as err:
        raise ValueError(
            f"{path} is not a study file ({type(err).__name__}: {err}); give the .csv "
            f"or .json that save_study wrote"
        ) from err


def _typed(kind: str, value):
    """A CSV cell (text) as the field's type; JSON values pass through."""
    if not isinstance(value, str) or kind == "str":
        return value
    if kind == "float | None":  # measured or not (Record.cpu_share): an empty cell is None
        return float(value) if value else None
    if kind == "bool":  # Record.virtual: csv writes True and False as words
        return {"True": True, "False": False}[value]
    return {"int": int, "float": float}.get(kind, str)(value)


def subset(data: Data, n_train: int, n_test: int, seed: int = 0) -> Data:
    """``n_train`` training and ``n_test`` test samples of ``data``, drawn at random."""
    check_data(data)
    check_int(n_train, "n_train")
    check_int(n_test, "n_test")
    g = torch.Generator().manual_seed(seed)

    def pick(split: ImageSet, n: int) -> ImageSet:
        if n > len(split):
            raise ValueError(
                f"asked for {n} samples of a split of {len(split)}: ask for at most {len(split)}"
            )
        idx = torch.randperm(len(split), generator=g)[:n]
        return ImageSet(split.images[idx], split.labels[idx])

    return Data(data.name, pick(data.train, n_train), pick(data.test, n_test), data.classes)
