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
from collections.abc import Sequence
from pathlib import Path

from ..core.data import load_data
from ..core.files import atomic_write
from ..core.profiles import get_profile
from .analysis import aggregate, table
from .driver import SCALING, load_study, plan, run_study, save_study, subset
from .methods import METHODS
from .plots import plot_speedup, plot_study
from ..core.lr import LR_RULES

__all__ = ["main", "parse_args"]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}")
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def _methods(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {unknown}; choose from {list(METHODS)}"
        )
    return names


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options (see the module docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m companion.study", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--methods",
        type=_methods,
        default=["split", "ddp"],
        help=f"comma-separated, from {', '.join(METHODS)}",
    )
    p.add_argument("--devices", type=_ints, default=None, help="device counts (profile's)")
    p.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    p.add_argument("--scaling", choices=SCALING, default="strong")
    p.add_argument("--lr-rule", choices=list(LR_RULES), default="none")
    p.add_argument("--profile", default=None, help="ci, cpu or gpu (default: BOOK_PROFILE)")
    p.add_argument("--model", default=None)
    p.add_argument("--batch", type=int, default=None, help="global (strong) or per-device (weak)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--samples", type=int, default=None, help="use this many training samples")
    p.add_argument("--out", type=Path, default=Path("study-results"))
    p.add_argument("--plot-only", action="store_true", help="redraw from --out/study.json")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Run (or reload) the study and write the files; returns their paths."""
    args = parse_args(argv)
    out = args.out
    if args.plot_only:
        records = load_study(out / "study.json")
    else:
        profile = get_profile(args.profile)
        data = load_data(profile)
        if args.samples:
            data = subset(data, args.samples, min(len(data.test), max(1, args.samples // 4)))
        runs = plan(
            args.methods,
            args.devices or list(profile.device_counts),
            args.seeds,
            data=data,
            model=args.model or profile.model,
            batch=args.batch or profile.batch_size,
            lr=args.lr or profile.lr,
            epochs=args.epochs or profile.epochs,
            scaling=args.scaling,
            lr_rule=args.lr_rule,
            profile=profile.name,
        )
        records = run_study(
            runs, args.scaling, out / "study", progress=False if args.no_progress else None
        )
    points = aggregate(records)
    label = "; ".join(sorted({f"{r.hardware}, profile '{r.profile}'" for r in records}))
    text = table(points) + f"\nmeasured on: {label}\n"
    paths = list(save_study(records, out / "study"))
    paths.append(atomic_write(out / "table.txt", lambda f: f.write(text), binary=False))
    for name, plot in (("study.png", plot_study), ("speedup.png", plot_speedup)):
        fig = plot(points, label)
        paths.append(atomic_write(out / name, lambda f, fig=fig: fig.savefig(f, format="png")))
    print(text, end="")
    print("wrote " + ", ".join(str(p) for p in paths))
    return paths
