"""The epoch loop of one process per device, which every distributed trainer runs.

Used in: chapter 3 (chapters 5, 6, 8 and 9 pass it their own setup).

Every rank runs chapter 1's ``train_epoch`` over its own share of the data.
What makes the ranks agree is the step: chapter 3's averages the gradients
by hand after backward, DDP (chapter 5) does it during backward, chapter 6's
rebuilt DDPs and chapter 9's sharded ones in their own ways. The loop around
the step is the same for all of them, so it is written once, here:

* a fresh shuffle per epoch (``sampler.set_epoch``, when there is a sampler);
* a timed pass, stopped at ``max_steps`` global steps; the loss sum stays on
  the device, and ``on_step(step, loss, samples)`` sees each step;
* the loss and the sample count summed over the ranks, the test accuracy
  (``evaluate``, called on every rank), one :class:`Record` built on rank 0;
* an ``on_epoch(epoch, record, samples)`` hook (checkpoints, logs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..core.allocator import keep_freed_memory
from ..core.devices import hardware_label, is_virtual
from ..core.results import Record
from ..core.training import Timer, train_epoch, train_step
from .checkpoint import unwrap

__all__ = ["Rank", "epoch_record", "train_epochs"]

OnStep = Callable[[int, torch.Tensor, int], None]  # (global step, loss sum, samples) on this rank


@dataclass
class Rank:
    """What one rank trains with, and what its records say.

    ``evaluate(net)`` gives the test accuracy of the model inside the wrapper
    (its ``.module``); every rank calls it after each epoch, so it may be a
    collective. ``labels`` fills the :class:`Record`'s
    ``profile``, ``model``, ``dataset`` and ``precision``.
    """

    method: str  # the Record's method name
    device: torch.device
    train_iter: Iterable  # this rank's batches
    net: nn.Module  # the model as trained (wrapped or not)
    optimizer: torch.optim.Optimizer
    evaluate: Callable[[nn.Module], float]
    epochs: int
    labels: dict = field(default_factory=dict)
    step: Callable = train_step
    max_steps: int | None = None  # global steps, over all epochs
    sampler: Any = None  # anything with set_epoch(epoch), or None
    steps: int = 0  # global steps taken so far


def epoch_record(
    run: Rank, epoch: int, totals: torch.Tensor, timer: Timer, test_acc: float
) -> Record:
    """The one way an epoch's :class:`Record` is built; ``totals`` summed over the ranks.
    The CPU share is kept for one process only: waiting for other ranks lowers it."""
    loss_sum, n = totals.tolist()
    seconds, alone = timer.seconds, dist.get_world_size() == 1
    return Record(
        method=run.method,
        n_devices=dist.get_world_size(),
        epoch=epoch,
        test_acc=test_acc,
        sec_per_epoch=seconds,
        samples_per_sec=n / seconds,
        train_loss=loss_sum / max(n, 1),
        hardware=hardware_label(),
        cpu_share=timer.cpu_share if alone else None,
        virtual=is_virtual(dist.get_world_size(), run.device),
        **run.labels,
    )


def train_epochs(
    run: Rank,
    on_step: OnStep | None = None,
    on_epoch: Callable[[int, Record | None, int], None] | None = None,
    first_epoch: int = 0,
) -> list[Record]:
    """Epochs from ``first_epoch`` on; one :class:`Record` per epoch on rank 0.

    The sampler is already set to ``first_epoch`` (``DistributedSampler``
    starts at epoch 0); each later epoch gets ``set_epoch``.
    ``on_epoch(epoch, record, samples)`` runs on every rank after each
    epoch's evaluation (``record`` is ``None`` except on rank 0; ``samples``
    this rank read). A run stops at ``run.max_steps`` global steps.
    """
    loss_fn, records = nn.CrossEntropyLoss(), []
    keep_freed_memory()  # steady CPU step times (chapter 1)
    for epoch in range(first_epoch, run.epochs):
        if epoch > first_epoch and run.sampler is not None:  # the first: as set up
            run.sampler.set_epoch(epoch)  # a new shuffle, the same on all ranks
        dist.barrier()
        before, done = run.steps, 0
        left = None if run.max_steps is None else run.max_steps - before

        def counted(k: int, loss: torch.Tensor, samples: int) -> None:
            nonlocal done
            done = k
            if on_step is not None:
                on_step(before + k, loss, samples)

        with Timer(run.device, share=True) as timer:
            loss, samples = train_epoch(
                run.net, run.train_iter, loss_fn, run.optimizer, run.device, counted, run.step, left
            )
        run.steps = before + done
        totals = torch.tensor([loss * samples, samples], dtype=torch.float64, device=run.device)
        dist.all_reduce(totals)  # loss sum and samples, over all ranks
        test_acc = run.evaluate(unwrap(run.net))  # evaluation stays local: no wrapper
        record = epoch_record(run, epoch + 1, totals, timer, test_acc)
        if dist.get_rank() == 0:
            records.append(record)
        if on_epoch is not None:
            on_epoch(epoch, record if dist.get_rank() == 0 else None, samples)
        if run.steps == run.max_steps:
            break
    return records
