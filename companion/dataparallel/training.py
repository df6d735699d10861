"""Concise multi-device training, d2l style: wrap the model, train as on one device.

Used in: chapter 4.

:func:`wrap_dataparallel` picks ``nn.DataParallel`` on distinct GPUs and
:class:`~companion.dataparallel.rebuild.DataParallelByHand` otherwise (no GPU, or
virtual devices), and says which; :func:`train` trains the wrapped model with
chapter 1's loop and returns one :class:`~companion.core.results.Record` per epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ..core.devices import Device, as_devices, gpu_count
from ..core.lines import say
from ..core.profiles import Profile
from ..core.results import Record
from ..core.training import train as train_one_device
from .rebuild import DataParallelByHand, check_on_first_device

__all__ = ["wrap_dataparallel", "train"]


def wrap_dataparallel(
    net: nn.Module, devices: Sequence[Device], verbose: bool = True
) -> tuple[nn.Module, str]:
    """``(wrapped net, method)``: ``nn.DataParallel`` on distinct GPUs, else by hand.

    ``net`` must be on ``devices[0]``. Without distinct GPUs (no GPU, or virtual
    devices) ``nn.DataParallel`` cannot split the batch, so the re-implementation
    runs instead; the method name and, with ``verbose``, a printed line say so.
    """
    devices = as_devices(devices)
    check_on_first_device(net, devices)
    cuda = all(d.type == "cuda" for d in devices)
    if cuda and len(set(devices)) == len(devices):
        return nn.DataParallel(net, device_ids=devices), "nn.DataParallel"
    if gpu_count() == 0:
        why = "no GPU: nn.DataParallel would use one device (device_ids = [])"
        method = "DataParallel by hand (no GPU)"
    else:
        why = "virtual devices: nn.DataParallel needs distinct GPUs"
        method = "DataParallel by hand (virtual)"
    if verbose:
        say(f"{why};\n  training with DataParallelByHand on {len(devices)} device(s)")
    return DataParallelByHand(net, devices), method


def train(
    net: nn.Module,
    train_iter,
    test_iter,
    devices: Sequence[Device],
    *,
    epochs: int,
    lr: float,
    profile: Profile | str | None = None,
    model_name: str = "",
    dataset: str = "",
    warmup_steps: int = 3,
    verbose: bool = True,
    precision: str | None = None,
    channels_last: bool | None = None,
) -> list[Record]:
    """d2l's concise multi-GPU training: :func:`wrap_dataparallel` ``net``, train as on one device.

    The minibatches go to ``devices[0]`` and the wrapper scatters them; the loss
    is the mean over the gathered output, so uneven chunks need no weighting.
    Evaluation runs through the wrapper too. The epoch timer synchronises
    ``devices[0]``, which waits for the other devices: every step ends with
    their gradients summed on ``devices[0]``. ``precision`` and
    ``channels_last`` go to chapter 1's ``train`` (the profile's by default).
    """
    devices = as_devices(devices)
    net.to(devices[0])
    dp_net, method = wrap_dataparallel(net, devices, verbose)
    return train_one_device(
        dp_net,
        train_iter,
        test_iter,
        epochs=epochs,
        lr=lr,
        device=devices[0],
        method=method,
        n_devices=len(devices),
        profile=profile,
        model_name=model_name,
        dataset=dataset,
        warmup_steps=warmup_steps,
        precision=precision,
        channels_last=channels_last,
    )
