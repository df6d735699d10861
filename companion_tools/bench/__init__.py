"""Benchmarks: ``python -m companion_tools.bench NAME [options]``.

Used in: every chapter that makes a speed claim. Each module of this package
is one benchmark with a ``main(argv)``; every ratio it prints is measured in
one run (both sides timed in the same process, interleaved), because
machines are too noisy for numbers taken at different times to be compared.

Every benchmark builds its command line with ``bench_parser`` (the
options they share are defined once, here) and its ``main(argv)`` is
``measure_and_report``: parse, ``measure(**options)`` with the load average
watched, print the settings, the ratios and the load. Both are the package's
own plumbing, not part of the API a reader calls.

Every comparison follows the book's one measuring protocol
(:mod:`companion.core.noise`): the sides take turns, who goes first rotates
from round to round (:func:`rotated`), each round gives a paired ratio, and
the report prints their median, lowest and highest with the verdict of
:func:`~companion.core.noise.judge` against the book's target
(:data:`~companion.core.noise.TARGETS`) or against 1.
"""

from __future__ import annotations

import argparse
import re
import statistics
import textwrap
import time
from collections.abc import Callable, Sequence

from companion.core.allocator import keep_freed_memory
from companion.core.batches import rank_batch_size
from companion.core.checks import (
    PROFILE_HELP,
    RawDefaultsHelp,
    check_int,
    positive_arg,
    profile_arg,
)
from companion.core.devices import hardware_label, synchronize_all
from companion.core.noise import NOISE_RULE, TARGETS, Load, LoadWatch, Ratio, judge, rotated
from companion.core.profiles import get_profile
from companion.core.training import Timer
from companion.runtime import launcher  # not `launch`: the name of a benchmark here

__all__ = ["time_median", "available"]

# the options of a benchmark launched by launch_bench, with their defaults
LAUNCHED = dict(world_size=2, profile=None, model=None, global_batch=None, rounds=5, steps=10)

# the options that several benchmarks take: flag -> (destination, type, help); defaults differ
_SHARED = {
    "--world-size": ("world_size", positive_arg(int), "processes"),
    "--profile": ("profile", profile_arg, PROFILE_HELP),
    "--model": ("model", str, "lenet, resnet18 or convnet (default: the profile's)"),
    "--global-batch": ("global_batch", positive_arg(int), "global batch (default: the profile's)"),
    "--devices": ("n_devices", positive_arg(int), "devices to split over"),
    "--rounds": ("rounds", positive_arg(int), "timed rounds, every side in turn (median reported)"),
    "--repeats": ("repeats", positive_arg(int), "timed repeats (median reported)"),
    "--steps": ("steps", positive_arg(int), "steps per round"),
}


def plain_text(doc: str) -> str:
    """``doc`` without reStructuredText markup, as a terminal shows help: ````x```` and
    ``:func:`x``` become ``x``, a literal block's ``::`` a colon."""
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)
    return doc.replace("``", "").replace("::\n", ":\n")


HELP_WIDTH = 88  # a terminal's width, less a margin: no help line is wider


def fill(text: str, width: int = HELP_WIDTH) -> str:
    """``text`` wrapped to ``width``, paragraph by paragraph; an indented line (a list
    item, a literal block) is wrapped on its own, keeping its indent."""
    out = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.splitlines()
        if not any(line[:1].isspace() for line in lines):
            out.append(textwrap.fill(" ".join(line.strip() for line in lines), width))
            continue
        wrapped = []
        for line in lines:
            indent = line[: len(line) - len(line.lstrip())]
            wrapped.append(
                textwrap.fill(line, width, subsequent_indent=indent + "  ") if line else line
            )
        out.append("\n".join(wrapped))
    return "\n\n".join(out)


def bench_parser(name: str, doc: str, **defaults) -> argparse.ArgumentParser:
    """The parser of ``python -m companion_tools.bench NAME``, described by ``doc``.

    Each keyword names a shared option by its destination (``world_size=2``,
    ``rounds=5``, ``profile=None``, ...) and gives its default; the benchmark
    adds its own options to the parser returned.
    """
    target = f"target: {TARGETS[name].what} {TARGETS[name]}\n" if name in TARGETS else ""
    parser = argparse.ArgumentParser(
        prog=f"python -m companion_tools.bench {name}",
        description=fill(plain_text(doc)),
        epilog=fill(
            f"{target}\nEvery ratio is the median of paired rounds, printed with the lowest "
            f"and highest; {NOISE_RULE}."
        ),
        formatter_class=RawDefaultsHelp,
    )
    by_dest = {dest: (flag, kind, text) for flag, (dest, kind, text) in _SHARED.items()}
    for dest, default in defaults.items():
        flag, kind, text = by_dest[dest]
        metavar = flag[2:].upper().replace("-", "_")
        parser.add_argument(flag, dest=dest, metavar=metavar, type=kind, default=default, help=text)
    return parser


def measure_and_report(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    measure: Callable[..., object],
    report: Callable[[object, Load | None], str],
    heading: Callable[[dict, object], str] | None = None,
    in_process: bool = False,
) -> int:
    """A benchmark's ``main``: parse ``argv``, ``seen = measure(**options)``, print
    ``heading(options, seen)`` (the settings and hardware) and ``report(seen)`` (the
    times and their ratios, measured in this one run); returns the exit status 0.
    ``in_process``: ``measure`` runs in this process, whose threads' CPU share then
    tells a busy machine (:class:`~companion.core.noise.LoadWatch`)."""
    options = vars(parser.parse_args(argv))
    own = options.get("world_size") or options.get("n_devices") or 1
    watch = LoadWatch(own, in_process=in_process)
    seen = measure(**options)
    load = watch.done()
    if heading is not None:
        print(heading(options, seen))
    print(report(seen, load))
    print(load)
    return 0


def verdict(name: str, ratio: Ratio, load: Load | None = None, indent: str = "") -> str:
    """Three lines that judge ``ratio`` against the book's target ``TARGETS[name]``."""
    target = TARGETS[name]
    return (
        f"{indent}{target.what}\n{indent}  {ratio}, target {target}\n"
        f"{indent}  {judge(ratio, target, load)}"
    )


def run_settings(
    world_size: int,
    profile: str | None,
    *,
    model: str | None,
    global_batch: int | None,
    rounds: int,
    steps: int,
) -> dict:
    """A launched benchmark's settings, checked, as its report prints them (the model
    defaults to the one the profile's processes train, LeNet on the CPU with one GPU;
    the global batch to the profile's)."""
    if rounds < 1 or steps < 1:
        raise ValueError(f"rounds and steps must be >= 1, got {rounds}, {steps}")
    keep_freed_memory()  # as every timed loop of the book (chapter 1)
    profile = get_profile(profile)
    return dict(
        world_size=world_size,
        model=model or profile.processes.model,
        global_batch=global_batch or profile.batch_size,
        rounds=rounds,
        steps=steps,
        profile=profile.name,
        hardware=hardware_label(),
    )


def launch_bench(
    worker: Callable, world_size: int, profile: str | None, *args, timeout: float = 900, **options
) -> dict:
    """A launched benchmark's run: its settings (:func:`run_settings` of ``options``: model,
    global_batch, rounds, steps) and what rank 0's ``worker(rank, world_size, model,
    per-rank batch, rounds, steps, *args)`` returned."""
    settings = run_settings(world_size, profile, **options)
    batch = rank_batch_size(settings["global_batch"], world_size)
    rounds, steps = settings["rounds"], settings["steps"]
    seen = launcher.launch(
        worker, world_size, settings["model"], batch, rounds, steps, *args, timeout=timeout
    )[0]
    return {**seen, **settings}


def time_median(
    fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1, device=None
) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` untimed."""
    check_int(repeats, "repeats")
    check_int(warmup, "warmup", 0)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        with Timer(device) as t:
            fn()
        times.append(t.seconds)
    return statistics.median(times)


def take_turns(sides: dict, batches, r: int, devices, seen: dict) -> None:
    """Round ``r``: every side steps on each ``(X, y)`` of ``batches``, taking turns (who goes
    first rotates by round and batch); each step's seconds, ``devices`` synchronised, are
    appended to ``seen[side]``."""
    for i, (X, y) in enumerate(batches):
        for name in rotated(list(sides), r + i):
            synchronize_all(devices)
            start = time.perf_counter()
            sides[name](X, y)
            synchronize_all(devices)
            seen[name].append(time.perf_counter() - start)


def round_medians(seconds: list[float], steps: int) -> list[float]:
    """The median of each round's ``steps`` times, from the list :func:`take_turns` fills."""
    return [statistics.median(seconds[i : i + steps]) for i in range(0, len(seconds), steps)]


def available() -> list[str]:
    """Names of the benchmarks in this package."""
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
