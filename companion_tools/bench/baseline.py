"""Chapter 1: the fast one-device baseline against d2l's concise loop, in one run.

d2l's loop is the one of "Concise Implementation for Multiple GPUs" (d2l
12.6) on one GPU: a ``DataLoader`` with 4 worker processes converting one
image at a time (what ``d2l.load_data_fashion_mnist`` builds, here over the
profile's data set so that it runs offline too), the model wrapped in
``nn.DataParallel``, the batch copied to the GPU every step, fp32 (with
torch's default TF32 convolutions). Ours: device-resident batches
(``DeviceLoader``), mixed precision (the profile's, ``"auto"`` for ``gpu``:
bf16 on GPUs of compute capability 8.0+, fp16 with loss scaling before;
``BOOK_PRECISION=fp16`` forces a T4's choice), ``channels_last``
and ``cudnn.benchmark``. Both train the same model on the same data, one
epoch each in turn, who goes first rotating; the medians and the paired
ratio (median and range over rounds) are printed. On a GPU the ratio is
judged against the book's target (``companion.core.noise.TARGETS``). On a
CPU mixed precision and channels_last do not apply and ours stays fp32: the
ratio then shows only what the loader costs, judged against 1.
"""

from __future__ import annotations

import os
import statistics
from functools import partial

import torch
from torch import nn
from torch.utils.data import DataLoader

from companion.core.checks import count_arg, positive_arg
from companion.core.data import ImageSet, load_data
from companion.core.devices import hardware_label, try_devices
from companion.core.loaders import DeviceLoader
from companion.core.models import get_model
from companion.core.noise import TARGETS, Load, judge, paired_ratio, rotated
from companion.core.precision import MathMode, amp_train_step
from companion.core.profiles import get_profile
from companion.core.training import Timer, set_seed, train_epoch

from . import bench_parser, measure_and_report


def d2l_epoch(net, loader, optimizer, device) -> None:
    """One epoch the way d2l's concise ``train`` runs it (no evaluation)."""
    loss = nn.CrossEntropyLoss()
    net.train()
    for X, y in loader:
        optimizer.zero_grad()
        X, y = X.to(device), y.to(device)
        loss(net(X), y).backward()
        optimizer.step()


def measure(
    profile: str | None = None,
    *,
    model: str | None = None,
    rounds: int = 3,
    limit: int | None = None,
    workers: int = 4,
) -> dict:
    """Median seconds per epoch of both loops over ``rounds`` interleaved rounds."""
    profile = get_profile(profile)
    device = try_devices(1, verbose=False)[0]
    model, batch = model or profile.model, profile.batch_size
    train_set = load_data(profile, verbose=False).train
    if limit is not None:
        train_set = ImageSet(train_set.images[:limit], train_set.labels[:limit])
    set_seed(0)
    d2l_net = nn.DataParallel(get_model(model).to(device))
    loader = DataLoader(train_set, batch, shuffle=True, num_workers=workers)
    d2l_opt = torch.optim.SGD(d2l_net.parameters(), lr=profile.lr)
    # mixed precision ("auto"), unless BOOK_PRECISION names one (the profile then carries it)
    precision = profile.precision if os.environ.get("BOOK_PRECISION", "").strip() else "auto"
    mode = MathMode(precision, device, channels_last=device.type == "cuda")
    ours = mode.place(get_model(model), device)
    our_iter = DeviceLoader(train_set, batch, device, seed=0)
    our_opt = torch.optim.SGD(ours.parameters(), lr=profile.lr)
    step = partial(amp_train_step, mode=mode)
    sides = {
        "d2l's loop": lambda: d2l_epoch(d2l_net, loader, d2l_opt, device),
        "companion": lambda: train_epoch(
            ours, our_iter, nn.CrossEntropyLoss(), our_opt, device, step=step
        ),
    }
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    benchmark = torch.backends.cudnn.benchmark
    for r in range(rounds + 1):  # round 0 warms up both sides, untimed
        for name, epoch in rotated(list(sides.items()), r):
            torch.backends.cudnn.benchmark = name == "companion"
            with Timer(device) as t:
                epoch()
            if r:
                seconds[name].append(t.seconds)
    torch.backends.cudnn.benchmark = benchmark
    median = {name: statistics.median(s) for name, s in seconds.items()}
    return dict(
        median=median,
        seconds=seconds,
        ratio=paired_ratio(seconds["companion"], seconds["d2l's loop"]).median,
        math=str(mode),
        model=model,
        samples=len(train_set),
        batch=batch,
        rounds=rounds,
        workers=workers,
        hardware=hardware_label(),
        profile=profile.name,
        gpu=device.type == "cuda",
    )


def report(seen: dict, load: Load | None = None) -> str:
    """The medians, the ratio and what it is held against (a record file written before
    the rounds were kept holds the median ratio only)."""
    rounds = seen.get("seconds")
    if not rounds:
        ratio = f"{seen['ratio']:.2f}"
        target = f"median of {seen['rounds']} rounds; the record keeps no rounds: no verdict"
    elif seen["gpu"]:
        ratio = paired_ratio(rounds["companion"], rounds["d2l's loop"])
        target = f"target {TARGETS['baseline']}: {judge(ratio, TARGETS['baseline'], load)}"
    else:
        ratio = paired_ratio(rounds["companion"], rounds["d2l's loop"])
        target = f"no target on a CPU (no mixed precision); against 1: {judge(ratio, 1.0, load)}"
    theirs, ours = seen["median"]["d2l's loop"], seen["median"]["companion"]
    return "\n".join(
        [
            f"{seen['model']}, {seen['samples']:,} images, batch {seen['batch']}, "
            f"median of {seen['rounds']} interleaved epochs",
            f"{seen['hardware']}, profile '{seen['profile']}'",
            f"  d2l's loop (DataLoader, {seen['workers']} workers, nn.DataParallel, fp32)"
            f"  {theirs:8.3f} s/epoch",
            f"  companion ({seen['math']}, device-resident)  {ours:8.3f} s/epoch",
            f"  ratio {ratio}",
            f"  {target}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("baseline", __doc__, profile=None, model=None, rounds=3)
    parser.add_argument("--limit", type=positive_arg(int), help="use the first N images")
    parser.add_argument("--workers", type=count_arg, default=4, help="DataLoader workers")
    return measure_and_report(parser, argv, measure, report, in_process=True)
