"""Seed 002's experiment as published, and what confounds its comparison.

Used in: chapter 7. "Seed 002" is the book's second source page (d2l's concise
multi-GPU section), not a random seed; ``*_as_published`` names are its code
as that page publishes it.

d2l's concise multi-GPU section trains ResNet-18 on Fashion-MNIST on 1 GPU
(batch 256, lr 0.1), then on 2 GPUs (batch 512, lr 0.2), and compares the
last epoch's test accuracy. Its PyTorch ``train(net, num_gpus, batch_size,
lr)`` receives one ``net`` built once, outside, and re-initialises only the
weights of its ``Linear`` and ``Conv2d`` layers: their biases, and every
BatchNorm scale, shift and running statistic, carry over from the previous
call. :func:`train_as_published` does the same, on chapter 4's DataParallel;
:func:`carried_over` names what survives the re-initialisation. Chapter 7
then repeats the comparison with a fresh model per run and several seeds.
"""

from __future__ import annotations

from torch import nn

from ..core.checks import check_module
from ..core.data import Data
from ..core.devices import try_devices
from ..core.loaders import load_iters
from ..core.results import Record
from ..dataparallel.training import train as train_dataparallel

__all__ = ["carried_over", "init_weights_as_published", "train_as_published"]


def init_weights_as_published(m: nn.Module) -> None:
    """d2l's ``init_weights``: normal(0, 0.01) weights for Linear and Conv2d only."""
    if type(m) in (nn.Linear, nn.Conv2d):
        nn.init.normal_(m.weight, std=0.01)


def train_as_published(
    net: nn.Module,
    n_devices: int,
    data: Data,
    batch_size: int,
    lr: float,
    epochs: int,
    profile: str | None = None,
    seed: int = 0,
) -> list[Record]:
    """d2l's ``train``: re-initialise some weights of ``net`` in place, then train.

    The caller keeps ``net`` and passes it again to the next call, as seed
    002 does; the state that the re-initialisation misses is carried into
    the next run.
    """
    devices = try_devices(n_devices, verbose=False)
    net.apply(init_weights_as_published)
    train_iter, test_iter = load_iters(data, batch_size, devices[0], seed=seed)
    return train_dataparallel(
        net,
        train_iter,
        test_iter,
        devices,
        epochs=epochs,
        lr=lr,
        profile=profile,
        model_name=type(net).__name__,
        dataset=data.name,
        verbose=False,
    )


def carried_over(net: nn.Module) -> dict[str, int]:
    """What :func:`init_weights_as_published` leaves as it was: tensors and scalars, by kind."""
    check_module(net)
    reset = {id(m.weight) for m in net.modules() if type(m) in (nn.Linear, nn.Conv2d)}
    kept = [p for p in net.parameters() if id(p) not in reset]
    buffers = [b for b in net.buffers() if b.is_floating_point()]
    return {
        "parameters re-initialised": sum(p.numel() for p in net.parameters() if id(p) in reset),
        "parameters kept (biases, BatchNorm scale and shift)": sum(p.numel() for p in kept),
        "BatchNorm running statistics kept": sum(b.numel() for b in buffers),
    }
