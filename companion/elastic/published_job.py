"""A published torchrun job (the book's source page "seed 003"): its five mistakes, each
reproduced, measured and fixed.

Used in: chapter 8. The module is named for what it holds, the job as it was
published, not for a random seed.

The job (a TensorStack ``PyTorchTrainingJob`` running an MNIST script under
torchrun with ``maxRestarts: 3``) trains, and each mistake goes unnoticed:

* ``F.softmax`` before ``CrossEntropyLoss``: shown by :func:`double_softmax`
  and chapter 5's ``train_with_mistake(.., "softmax")``; fixed by
  ``check_logits``.
* every rank reads the whole data set: shown in chapter 5
  (``train_with_mistake(.., "no-sampler")``, ``check_disjoint_shards``);
  fixed by ``DistributedSampler``.
* lr times world size, no warm-up: shown by :func:`lr_without_warmup`;
  fixed by ``warmup_schedule``.
* rank 0 downloads "in advance", with no barrier: shown by
  :func:`download_race` (a worker); fixed by a barrier and an atomic
  download.
* rank 0 deletes the TensorBoard directory: shown by
  :func:`restarted_logs`; fixed by ``purge_step``.

The measurements run in one process: DDP's step on a global batch is the
single-process step on that batch (chapter 5), so the effect of an lr or a
loss does not need several processes to be seen.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_int
from ..core.data import Data
from ..core.files import atomic_write
from ..core.loaders import DeviceLoader
from ..core.models import get_model
from ..core.results import Record
from ..core.training import evaluate_accuracy, set_seed, train
from ..runtime.tblog import read_scalars
from .trainer import warmup_schedule

__all__ = [
    "softmax_loss_floor",
    "double_softmax",
    "lr_without_warmup",
    "download_race",
    "restarted_logs",
]


def softmax_loss_floor(classes: int = 10) -> float:
    """The smallest ``CrossEntropyLoss`` of probabilities: ``log(1 + (classes - 1) / e)``.

    ``CrossEntropyLoss`` applies ``log_softmax`` to what it gets; given
    probabilities in [0, 1], the best it can see is ``[1, 0, ..., 0]``,
    whose softmax gives the right class ``e / (e + classes - 1)``.
    """
    check_int(classes, "classes")
    return math.log(1 + (classes - 1) / math.e)


def double_softmax(
    data: Data, epochs: int, lr: float, batch_size: int = 64, seed: int = 0
) -> dict[str, list[Record]]:
    """LeNet trained with logits (right) and with a softmax before the loss (the tutorial's)."""
    train_iter = DeviceLoader(data.train, batch_size, shuffle=True, seed=seed)
    test_iter = DeviceLoader(data.test, 256)
    runs = {}
    for name, head in (("logits", []), ("softmax, then CrossEntropyLoss", [nn.Softmax(dim=1)])):
        set_seed(seed)
        net = nn.Sequential(get_model("lenet"), *head)
        runs[name] = train(
            net,
            train_iter,
            test_iter,
            epochs=epochs,
            lr=lr,
            method=name,
            warmup_steps=0,
            progress=False,
        )
    return runs


def lr_without_warmup(
    data: Data, world_size: int, steps: int, warmup_steps: int, seed: int = 0
) -> dict[str, tuple[list[float], float]]:
    """The tutorial's rule, Adam at ``0.001 * world_size`` on a global batch of ``32 * world_size``.

    Without and with a linear warm-up over ``warmup_steps``: for each, the
    loss at every step and the final test accuracy (one process on the
    global batch: the same step as DDP's).
    """
    X, y = data.train.tensors()
    batch, runs = 32 * check_int(world_size, "world_size"), {}
    if batch > len(y):  # no full batch: the loop below would never end
        raise ValueError(
            f"a global batch of {batch} (32 x world_size {world_size}) is more than the "
            f"{len(y)} training samples: give a smaller world_size or more data"
        )
    for warm in (0, warmup_steps):
        set_seed(seed)
        net = get_model("lenet")
        optimizer = torch.optim.Adam(net.parameters(), lr=0.001 * world_size)
        scheduler = warmup_schedule(optimizer, warm)
        g, losses = torch.Generator().manual_seed(seed), []
        while len(losses) < steps:
            order = torch.randperm(len(y), generator=g)
            for start in range(0, len(y) - batch + 1, batch):
                idx = order[start : start + batch]
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(net(X[idx]), y[idx])
                loss.backward()
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
                if len(losses) == steps:
                    break
        accuracy = evaluate_accuracy(net, [data.test.tensors()])
        runs[f"warm-up {warm} steps" if warm else "no warm-up"] = (losses, accuracy)
    return runs


def _download(path: Path, payload: bytes, readers: list[Path], wait: float) -> None:
    """A slow download: half the bytes, a pause (until the readers have looked), the rest."""
    with open(path, "wb") as f:
        f.write(payload[: len(payload) // 2])
        f.flush()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not all(r.exists() for r in readers):
            time.sleep(0.05)
        f.write(payload[len(payload) // 2 :])


def download_race(
    rank: int, world_size: int, root: str, fixed: bool, payload: bytes = bytes(range(256)) * 64
) -> str:
    """Worker: rank 0 "downloads" ``root/data.bin``, every rank then reads it; what it read.

    Seed 003: rank 0 downloads in advance, the others go straight on to read
    (here they find half a file, or none). The pause is the network's: rank
    0 finishes once the readers have looked (30 s at most), as a real
    download of a data set would, so the race goes the same way every run. Fixed: rank
    0 writes the file atomically, and the others wait at a barrier first.
    """
    path, root = Path(root) / "data.bin", Path(root)
    readers = [root / f"read-by-{r}" for r in range(1, world_size)]
    if rank == 0:
        if fixed:
            atomic_write(path, lambda f: f.write(payload))
        else:
            _download(path, payload, readers, wait=30.0)
    if fixed:
        dist.barrier()  # nobody reads before rank 0 is done
    try:
        got = path.read_bytes()
        seen = "whole" if got == payload else f"{len(got)} of {len(payload)} bytes"
    except FileNotFoundError:
        seen = "no file"
    if rank:
        readers[rank - 1].touch()
    dist.barrier()
    return seen


def restarted_logs(
    log_dir: str | Path, delete: bool, killed_at: int = 30, resumed_from: int = 20, steps: int = 50
) -> list[int]:
    """Two attempts of a job logging ``train/loss``; the steps TensorBoard shows in the end.

    The first attempt logs steps ``1..killed_at`` and dies; the second
    resumes at ``resumed_from`` (its snapshot) and logs on to ``steps``.
    Seed 003 (``delete``): the second attempt's rank 0 deletes the directory
    first, and the first attempt's history is gone. Fixed: nothing deleted;
    ``purge_step`` tells TensorBoard to drop the old points the second
    attempt writes again.
    """
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(log_dir)) as writer:
        for step in range(1, killed_at + 1):
            writer.add_scalar("train/loss", 1 / step, step)
    if delete:
        shutil.rmtree(log_dir, ignore_errors=True)
    purge = None if delete else resumed_from + 1
    with SummaryWriter(str(log_dir), purge_step=purge) as writer:
        for step in range(resumed_from + 1, steps + 1):
            writer.add_scalar("train/loss", 1 / step, step)
    quiet = logging.getLogger("tensorboard")  # it warns that it purges: that is the point
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return [step for step, _ in read_scalars(log_dir)["train/loss"]]
    finally:
        quiet.setLevel(level)
