"""Chapter 4: DataParallel vs one device across batch sizes (small batches are slower).

For each batch size, the same minibatches train the profile's model on one
device (chapter 1's ``train_step``) and through ``DataParallelByHand`` on
``k`` devices (and ``nn.DataParallel`` too, on ``k`` distinct GPUs). The sides
take turns step by step in one run, the order rotating and every round
visiting every batch size, each step timed with the devices synchronised; the
ratio of median step times (wrapper over one device) is printed per batch
size: above 1 means slower than one device.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from companion.core.checks import positive_arg
from companion.core.data import load_data
from companion.core.devices import (
    describe_devices,
    hardware_label,
    try_devices,
)
from companion.core.models import get_model
from companion.core.noise import Load, Ratio, judge, paired_ratio
from companion.core.profiles import get_profile
from companion.core.training import set_seed, train_step
from companion.dataparallel.rebuild import DataParallelByHand

from . import bench_parser, measure_and_report, round_medians, take_turns

BATCH_SIZES = (8, 32, 128, 512)


@dataclass
class SweepRow:
    """Median seconds per training step of every side, for one batch size."""

    batch_size: int
    seconds: dict[str, float]  # side -> median s/step; "1 device" is the baseline
    per_round: dict[str, list[float]]  # side -> each round's median s/step

    def ratio(self, side: str) -> Ratio:
        """Seconds per step of ``side`` over one device's, paired by round."""
        return paired_ratio(self.per_round[side], self.per_round["1 device"])


def _sides(model: str, devices: list[torch.device]) -> dict[str, nn.Module]:
    """The models to time, all starting from the same weights, by side name."""
    set_seed(0)
    base = get_model(model).to(devices[0])
    k = len(devices)
    nets = {
        "1 device": base,
        f"by hand ({k})": DataParallelByHand(copy.deepcopy(base), devices),
    }
    if len(set(devices)) == k and devices[0].type == "cuda":
        nets[f"nn.DataParallel ({k})"] = nn.DataParallel(copy.deepcopy(base), device_ids=devices)
    return nets


def measure(
    profile: str | None = None,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
    steps: int = 6,
    rounds: int = 5,
    n_devices: int = 2,
) -> list[SweepRow]:
    """Median seconds per step of every side, ``rounds`` x ``steps`` per batch size.

    Every round visits every batch size, so a burst of load on a shared machine
    hits all batch sizes alike instead of one of them.
    """
    if min(batch_sizes) < n_devices:  # DataParallel would use fewer devices than asked
        raise ValueError(
            f"batch size {min(batch_sizes)} is smaller than the {n_devices} devices "
            f"(--batch-sizes, --devices): give each device at least one sample"
        )
    profile = get_profile(profile)
    devices = try_devices(n_devices, verbose=False)
    data = load_data(profile, verbose=False)
    X_all, y_all = data.train.tensors(devices[0])
    loss_fn = nn.CrossEntropyLoss()
    setups = {}
    for b in batch_sizes:
        sides = {  # side -> its training step on (X, y)
            name: partial(
                train_step,
                net,
                loss_fn=loss_fn,
                optimizer=torch.optim.SGD(net.parameters(), lr=profile.lr),
            )
            for name, net in _sides(profile.model, devices).items()
        }
        g = torch.Generator().manual_seed(b)
        picks = [torch.randint(len(y_all), (b,), generator=g).to(devices[0]) for _ in range(steps)]
        batches = [(X_all[idx], y_all[idx]) for idx in picks]
        for X, y in batches[:2]:  # warm-up, untimed
            for step in sides.values():
                step(X, y)
        setups[b] = sides, batches
    seen = {b: {name: [] for name in setups[b][0]} for b in batch_sizes}
    for r in range(rounds):
        for b, (sides, batches) in setups.items():
            take_turns(sides, batches, r, devices, seen[b])

    return [
        SweepRow(
            b,
            {name: statistics.median(s) for name, s in seen[b].items()},
            {name: round_medians(s, steps) for name, s in seen[b].items()},
        )
        for b in batch_sizes
    ]


def report(rows: list[SweepRow], load: Load | None = None) -> str:
    """The sweep as a table: ms per step of every side, and each wrapper's ratio (median
    of the rounds); then each ratio's range and its verdict against 1."""
    sides = list(rows[0].seconds)
    widths = [max(len(side), 8) for side in sides]
    head = f"  {'batch':>5}  " + "  ".join(f"{s:>{w}}" for s, w in zip(sides, widths))
    lines = [head + "".join(f"  ratio {s}" for s in sides[1:])]
    for row in rows:
        line = f"  {row.batch_size:>5}  " + "  ".join(
            f"{row.seconds[s] * 1e3:>{w - 3}.2f} ms" for s, w in zip(sides, widths)
        )
        line += "".join(f"  {row.ratio(s).median:>{len(s) + 6}.2f}" for s in sides[1:])
        lines.append(line)
    lines.append("  each ratio over rounds (lowest-highest), against 1 (below: faster):")
    for row in rows:
        for s in sides[1:]:
            ratio = row.ratio(s)
            lines.append(f"    batch {row.batch_size:>5}, {s}: {ratio}")
            lines.append(f"      {judge(ratio, 1.0, load)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("dataparallel", __doc__, profile=None, steps=6, rounds=5, n_devices=2)
    parser.add_argument(
        "--batch-sizes",
        type=positive_arg(int),
        nargs="+",
        metavar="N",
        default=list(BATCH_SIZES),
        help="global batch sizes",
    )
    return measure_and_report(parser, argv, measure, report, _heading, in_process=True)


def _heading(options: dict, rows: list[SweepRow]) -> str:
    profile = get_profile(options["profile"])
    devices = describe_devices(try_devices(options["n_devices"], verbose=False))
    return (
        f"dataparallel benchmark: profile '{profile.name}', {hardware_label()}, model "
        f"{profile.model}, {options['rounds']} rounds of {options['steps']} steps per batch size\n"
        f"  devices: {devices}\n"
        f"  median ms per training step; ratio = wrapper / 1 device"
    )
