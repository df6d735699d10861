"""``python -m companion.study``: the scaling study on the reader's own machine.

Used in: chapter 7. For example::

    python -m companion.study --methods ddp,split --devices 1,2,4 --seeds 0,1,2

trains every method at every device count with every seed, from fresh
models, and writes into ``--out``: ``study.csv`` and ``study.json`` (the
records, with hardware and profile), ``table.txt``, ``study.png`` (accuracy
and s/epoch) and ``speedup.png`` (speed-up and efficiency against ideal).
``--plot-only`` redraws them from an existing ``study.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.checks import PROFILE_HELP, DefaultsHelp, check_distinct, positive_arg, profile_arg
from ..core.data import load_data
from ..core.files import atomic_write
from ..core.lr import LR_RULES
from ..core.profiles import get_profile
from .analysis import FLAGS, QUIET, aggregate, table
from .driver import SCALING, load_study, plan, run_study, save_study, subset
from .methods import METHODS, Method
from .plots import plot_speedup, plot_study

__all__ = ["main", "parse_args"]


def _ints(minimum: int):
    """An argparse ``type``: distinct integers >= ``minimum``, separated by commas."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected integers separated by commas, got {text!r}"
            ) from None
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(
                f"expected integers >= {minimum} separated by commas, got {text!r}"
            )
        try:
            return check_distinct(values, "the list")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "integer list"
    return parse


def _methods(catalog: Mapping[str, Method]):
    """An argparse ``type``: distinct names of ``catalog``, separated by commas."""

    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        unknown = [n for n in names if n not in catalog]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown method(s) {unknown}; choose from {list(catalog)}"
            )
        try:
            return check_distinct(names, "the list")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "method list"
    return parse


def parse_args(
    argv: Sequence[str] | None = None, catalog: Mapping[str, Method] = METHODS
) -> argparse.Namespace:
    """The command line's options (see the module docstring); methods are ``catalog``'s."""
    p = argparse.ArgumentParser(
        prog="python -m companion.study",
        description="The scaling study on your own machine: every method at every device "
        "count with every seed, from fresh models. Writes study.csv, study.json, table.txt, "
        "study.png and speedup.png into --out.",
        epilog="example: python -m companion.study --methods ddp,split --devices 1,2,4 "
        "--seeds 0,1,2. Flags in table.txt mark a speed-up that cannot be read as one: "
        + "; ".join(f"'{flag}': {why}" for flag, why in FLAGS.items())
        + f"; {QUIET}.",
        formatter_class=DefaultsHelp,
    )
    add = p.add_argument
    add(
        "--methods",
        type=_methods(catalog),
        default="split,ddp",
        help="comma-separated, from: "
        + "; ".join(
            f"{name} (chapter {m.chapter}{': ' + m.about if m.about else ''})"
            for name, m in catalog.items()
        ),
    )
    add(
        "--devices",
        type=_ints(1),
        default=None,
        help="comma-separated device counts (default: the profile's)",
    )
    add(
        "--seeds",
        type=_ints(0),
        default="0,1,2",
        help="comma-separated, distinct seeds: each run is repeated with each",
    )
    add(
        "--scaling",
        choices=SCALING,
        default="strong",
        help="strong: fixed global batch; weak: fixed batch per device",
    )
    add(
        "--lr-rule",
        choices=list(LR_RULES),
        default="none",
        help="how weak scaling changes the learning rate with the device count",
    )
    add("--profile", type=profile_arg, default=None, help=PROFILE_HELP)
    add("--model", default=None, help="lenet, resnet18 or convnet (default: the profile's)")
    add(
        "--batch",
        type=positive_arg(int),
        default=None,
        help="global (strong) or per-device (weak) batch (default: the profile's)",
    )
    add(
        "--lr",
        type=positive_arg(float),
        default=None,
        help="learning rate (default: the profile's)",
    )
    add(
        "--epochs",
        type=positive_arg(int),
        default=None,
        help="epochs to train (default: the profile's)",
    )
    add(
        "--samples",
        type=positive_arg(int),
        default=None,
        help="use this many training samples (default: all of the data set)",
    )
    add(
        "--out",
        type=Path,
        default=Path("study-results"),
        help="folder for study.csv, study.json, table.txt and the figures",
    )
    add("--plot-only", action="store_true", help="redraw from --out/study.json")
    add(
        "--no-progress",
        action="store_true",
        help="no progress bar on a terminal, and no line per run when stderr is a file or pipe",
    )
    args = p.parse_args(argv)
    if args.plot_only and not (args.out / "study.json").is_file():
        p.error(
            f"--plot-only redraws from {args.out / 'study.json'}, which does not exist: "
            f"run the study first, or give the folder that holds it with --out"
        )
    return args


def main(argv: Sequence[str] | None = None, catalog: Mapping[str, Method] = METHODS) -> list[Path]:
    """Run (or reload) the study and write the files; returns their paths.

    ``catalog``: the methods it may run (``python -m companion.study`` passes every
    chapter's, joined in ``companion.commands``).
    """
    args = parse_args(argv, catalog)
    out = args.out
    if args.plot_only:
        records = load_study(out / "study.json")
    else:
        profile = get_profile(args.profile)
        data = load_data(profile)
        if args.samples is not None:
            data = subset(data, args.samples, min(len(data.test), max(1, args.samples // 4)))
        runs = plan(
            args.methods,
            _given(args.devices, list(profile.device_counts)),
            args.seeds,
            data=data,
            model=_given(args.model, profile.model),
            batch=_given(args.batch, profile.batch_size),
            lr=_given(args.lr, profile.lr),
            epochs=_given(args.epochs, profile.epochs),
            scaling=args.scaling,
            lr_rule=args.lr_rule,
            profile=profile.name,
            catalog=catalog,
        )
        records = run_study(
            runs,
            args.scaling,
            out / "study",
            progress=False if args.no_progress else None,
            log_lines=not args.no_progress and not sys.stderr.isatty(),  # `| tee log`: lines
            catalog=catalog,
        )
    points = aggregate(records)
    label = "; ".join(
        sorted({f"{r.hardware}, profile '{r.profile}', {r.precision}" for r in records})
    )
    text = table(points) + f"\nmeasured on: {label}\n"
    paths = list(save_study(records, out / "study"))
    paths.append(atomic_write(out / "table.txt", lambda f: f.write(text), binary=False))
    for name, plot in (("study.png", plot_study), ("speedup.png", plot_speedup)):
        fig = plot(points, label)
        paths.append(atomic_write(out / name, lambda f, fig=fig: fig.savefig(f, format="png")))
    print(text, end="")
    print("wrote:\n" + "\n".join(f"  {p}" for p in paths))
    return paths


def _given(value, default):
    """``value`` unless the option was not given (``None``): 0 is a value, not "not given"."""
    return default if value is None else value
