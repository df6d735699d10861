"""Chapter 1: loop efficiency of the DataLoader and the device-resident loops.

Loop efficiency = pure compute time / epoch time, both measured in the same
epoch: the clock runs around the whole epoch and, separately, around each
training step (forward, backward, update, device synchronised), and pure
compute is the sum of the step times. What is left is the cost of producing
minibatches. The two loops are timed in interleaved rounds, in one run, who goes
first rotating; each loop's efficiency is the median of its rounds, with their
range. Under the ``cpu`` profile the device-resident loop's is judged against
the book's target (``companion.core.noise.TARGETS``).
"""

from __future__ import annotations

import statistics

import torch
from torch import nn

from companion.core.data import load_data
from companion.core.devices import hardware_label, try_devices
from companion.core.loaders import DeviceLoader, data_loader
from companion.core.models import get_model
from companion.core.noise import TARGETS, Load, Ratio, judge, rotated
from companion.core.profiles import get_profile
from companion.core.training import Timer, set_seed, train_step

from . import bench_parser, measure_and_report


def timed_epoch(net, iterator, loss_fn, opt, device) -> tuple[float, float]:
    """One training epoch; returns ``(epoch seconds, seconds inside the steps)``."""
    compute, step = 0.0, Timer(device)
    with Timer(device) as epoch:
        for X, y in iterator:
            X, y = X.to(device), y.to(device)
            with step:
                train_step(net, X, y, loss_fn, opt)
            compute += step.seconds
    return epoch.seconds, compute


class LoopTimes(dict):
    """``{loop: (median seconds per epoch, loop efficiency as a Ratio over rounds)}``,
    with the ``profile`` that produced them."""

    profile: str = ""


def measure(profile: str | None = None, rounds: int = 5) -> LoopTimes:
    """Per loop: median s/epoch and loop efficiency (median and range) over ``rounds``."""
    profile = get_profile(profile)
    device = try_devices(1, verbose=False)[0]
    data = load_data(profile, verbose=False)
    set_seed(0)
    net = get_model(profile.model).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(net.parameters(), lr=profile.lr)
    loops = {
        "device-resident": DeviceLoader(data.train, profile.batch_size, device, seed=0),
        "DataLoader": data_loader(data.train, profile.batch_size, seed=0),
    }
    for iterator in loops.values():  # warm-up round, untimed
        timed_epoch(net, iterator, loss_fn, opt, device)
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
    for r in range(rounds):
        for name, iterator in rotated(list(loops.items()), r):
            seen[name].append(timed_epoch(net, iterator, loss_fn, opt, device))
    found = LoopTimes(
        (name, (statistics.median(e for e, _ in runs), Ratio.of([c / e for e, c in runs])))
        for name, runs in seen.items()
    )
    found.profile = profile.name
    return found


def report(secs: dict[str, tuple[float, Ratio | float]], load: Load | None = None) -> str:
    """Per loop: the median seconds per epoch and loop efficiency; under the cpu profile,
    the device-resident loop's verdict against the book's target."""
    lines = [
        f"  {name:<16} {sec:8.4f} s/epoch   loop efficiency {eff:5.3f}"
        for name, (sec, eff) in secs.items()
    ]
    if getattr(secs, "profile", "") == "cpu":
        target, eff = TARGETS["loop"], secs["device-resident"][1]
        lines.append(f"  {target.what}\n  target {target}: {judge(eff, target, load)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("loop", __doc__, profile=None, rounds=5)
    return measure_and_report(parser, argv, measure, report, _heading, in_process=True)


def _heading(options: dict, secs) -> str:
    profile = get_profile(options["profile"])
    return (
        f"loop benchmark: profile '{profile.name}', {hardware_label()}, "
        f"model {profile.model}, batch {profile.batch_size}, "
        f"median of {options['rounds']} epochs"
    )
