"""Chapter 2: a batch split by hand over 2 devices vs one device; where the time goes.

All sides train the same model on the same minibatches (the profile's global
batch size): one device with ``companion.core.training.train_step``, and ``k`` devices
with ``companion.split.naive.train_batch`` (naive) and
``companion.split.fused.train_batch_foreach`` (foreach). They take turns step by
step in one run, the order rotating, every step timed with the devices
synchronised; each ratio is the median of the rounds' paired ratios (a round's
median step time over one device's in the same round), with their range,
judged against the book's target (``companion.core.noise.TARGETS``; the ci
profile's) or, under other profiles, against 1. Instrumented runs
then time the phases of both split steps one by one, to show where the time
goes; the one-off cost of ``copy_replicas`` is measured apart.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from companion.core.checks import positive_arg
from companion.core.data import load_data
from companion.core.devices import (
    describe_devices,
    hardware_label,
    synchronize_all,
    try_devices,
)
from companion.core.loaders import DeviceLoader
from companion.core.models import get_model
from companion.core.noise import TARGETS, Load, Ratio, judge, paired_ratio
from companion.core.profiles import get_profile
from companion.core.training import set_seed, train_step
from companion.split.fused import (
    allreduce_grads_foreach,
    forward_backward_once,
    sgd_foreach,
    train_batch_foreach,
)
from companion.split.naive import (
    allreduce_grads,
    copy_replicas,
    forward_backward,
    sgd,
    split_batch,
    train_batch,
)

from . import bench_parser, measure_and_report, round_medians, take_turns, time_median

PHASES = ("split_batch", "forward_backward", "allreduce_grads", "sgd")
VERSIONS = {
    "naive": (forward_backward, allreduce_grads, sgd),
    "foreach": (forward_backward_once, allreduce_grads_foreach, sgd_foreach),
}


@dataclass
class SplitTimes:
    """Median seconds per training step and per phase of a split step."""

    step: dict[str, float]  # "one device", "naive", "foreach"
    per_round: dict[str, list[float]]  # each round's median seconds per step
    phases: dict[str, dict[str, float]]  # version -> phase -> seconds
    copy_replicas: float
    n_devices: int
    batch_size: int
    steps: int
    profile: str = "ci"

    def ratio(self, version: str) -> Ratio:
        """Seconds per step split by hand (``version``) over one device's, paired by round."""
        return paired_ratio(self.per_round[version], self.per_round["one device"])


def phase_times(batches, replicas, devices, lr: float, version: str) -> dict[str, list]:
    """Seconds in each phase of a split step (``version``), one entry per batch."""
    fwd_bwd, reduce_grads, update = VERSIONS[version]
    loss = nn.CrossEntropyLoss(reduction="none")
    spent = {name: [] for name in PHASES}

    def clock(name, fn, *args):
        synchronize_all(devices)
        start = time.perf_counter()
        out = fn(*args)
        synchronize_all(devices)
        spent[name].append(time.perf_counter() - start)
        return out

    for X, y in batches:
        X_shards, y_shards = clock("split_batch", split_batch, X, y, devices)
        clock("forward_backward", fwd_bwd, replicas, X_shards, y_shards, len(y), loss)
        clock("allreduce_grads", reduce_grads, replicas)
        clock("sgd", lambda: [update(net.parameters(), lr) for net in replicas])
    return spent


def measure(
    profile: str | None = None,
    rounds: int = 5,
    steps: int | None = None,
    n_devices: int = 2,
) -> SplitTimes:
    """Time ``rounds`` passes over ``steps`` minibatches (default: one epoch)."""
    profile = get_profile(profile)
    devices = try_devices(n_devices, verbose=False)
    data = load_data(profile, verbose=False)
    loader = DeviceLoader(data.train, profile.batch_size, devices[0], seed=0)
    batches = list(loader)[: steps or len(loader)]
    set_seed(0)
    net = get_model(profile.model).to(devices[0])
    opt = torch.optim.SGD(net.parameters(), lr=profile.lr)
    loss_fn = nn.CrossEntropyLoss()
    naive, fast = copy_replicas(net, devices), copy_replicas(net, devices)
    timed = {version: copy_replicas(net, devices) for version in VERSIONS}
    sides = {
        "one device": lambda X, y: train_step(net, X, y, loss_fn, opt),
        "naive": lambda X, y: train_batch(X, y, naive, devices, profile.lr),
        "foreach": lambda X, y: train_batch_foreach(X, y, fast, devices, profile.lr),
    }
    seen = {name: [] for name in sides}
    phases = {version: {name: [] for name in PHASES} for version in VERSIONS}
    for X, y in batches[:3]:  # warm-up, untimed
        for step in sides.values():
            step(X, y)
    for version in VERSIONS:
        phase_times(batches[:3], timed[version], devices, profile.lr, version)
    for r in range(rounds):
        take_turns(sides, batches, r, devices, seen)
        for version in VERSIONS:
            spent = phase_times(batches, timed[version], devices, profile.lr, version)
            for name, secs in spent.items():
                phases[version][name] += secs
    return SplitTimes(
        step={name: statistics.median(secs) for name, secs in seen.items()},
        per_round={name: round_medians(secs, len(batches)) for name, secs in seen.items()},
        phases={
            version: {name: statistics.median(secs) for name, secs in spent.items()}
            for version, spent in phases.items()
        },
        copy_replicas=time_median(
            lambda: copy_replicas(net, devices), repeats=rounds, device=devices[0]
        ),
        n_devices=n_devices,
        batch_size=profile.batch_size,
        steps=len(batches),
        profile=profile.name,
    )


def _verdict(t: SplitTimes, load: Load | None) -> str:
    """The ci profile's target (LeNet, virtual CPU devices); other profiles: against 1."""
    if t.profile != "ci":
        return f"no target for '{t.profile}'; against 1: {judge(t.ratio('foreach'), 1.0, load)}"
    return f"ci target {TARGETS['split']}: {judge(t.ratio('foreach'), TARGETS['split'], load)}"


def report(t: SplitTimes, load: Load | None = None) -> str:
    """The measurement as text: step times, ratios, phases of both split steps."""
    k = t.n_devices
    lines = [
        f"  one device                  {t.step['one device'] * 1e3:6.2f} ms/step",
        f"  split by hand, naive   ({k})  {t.step['naive'] * 1e3:6.2f} ms/step"
        f"   ratio {t.ratio('naive')}",
        "    no target: the version to improve on",
        f"  split by hand, foreach ({k})  {t.step['foreach'] * 1e3:6.2f} ms/step"
        f"   ratio {t.ratio('foreach')}",
        f"    {_verdict(t, load)}",
        "  where a split step's time goes (median ms per phase, instrumented runs):",
        f"    {'':<18}{'naive':>8}{'foreach':>9}",
    ]
    for name in PHASES:
        naive, fast = (t.phases[v][name] * 1e3 for v in VERSIONS)
        lines.append(f"    {name:<18}{naive:8.3f}{fast:9.3f}")
    lines.append(f"  copy_replicas (once per training run): {t.copy_replicas * 1e3:.2f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("split", __doc__, profile=None, rounds=5, n_devices=2)
    parser.add_argument("--steps", type=positive_arg(int), default=None, help="default: one epoch")
    return measure_and_report(parser, argv, measure, report, _heading, in_process=True)


def _heading(options: dict, t: SplitTimes) -> str:
    profile = get_profile(options["profile"])
    devices = describe_devices(try_devices(t.n_devices, verbose=False))
    return (
        f"split benchmark: profile '{profile.name}', {hardware_label()}, model "
        f"{profile.model}, global batch {t.batch_size}, {options['rounds']} rounds of "
        f"{t.steps} steps\n  devices: {devices}"
    )
