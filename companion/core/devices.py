"""Devices: real GPUs when there are enough, virtual devices otherwise.

Used in: every chapter (chapter 1 introduces it).

A *virtual device* is a real device named more than once: ``[cpu, cpu]`` on a
machine without a GPU, or ``[cuda:0, cuda:0]`` on a one-GPU machine such as
Colab. Code written for a list of devices runs unchanged on it and computes
the same numbers as on distinct devices; it just cannot be faster, because
the "devices" share the same hardware.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

import torch

from .lines import say

__all__ = [
    "Device",
    "gpu_count",
    "try_devices",
    "as_devices",
    "model_device",
    "gpu_indices",
    "describe_devices",
    "is_virtual",
    "synchronize",
    "synchronize_all",
    "cpu_cores",
    "cpu_label",
    "hardware_label",
]

Device = int | str | torch.device


def gpu_count() -> int:
    """Number of CUDA GPUs this process can see (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def try_devices(n: int, *, verbose: bool = True) -> list[torch.device]:
    """``n`` devices: distinct GPUs if there are ``n`` of them, else virtual ones.

    * ``n`` or more GPUs: ``cuda:0 .. cuda:n-1``.
    * fewer GPUs (but at least one): the GPUs repeated round-robin, e.g. two
      virtual devices on one GPU are ``[cuda:0, cuda:0]``.
    * no GPU: ``n`` copies of ``cpu``.

    With ``verbose`` a one-line notice says which case applies, so a reader
    never mistakes virtual devices for real ones.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"need a device count >= 1, got {n!r}; ask for at least one device")
    gpus = gpu_count()
    if gpus >= n:
        devices = [torch.device(f"cuda:{i}") for i in range(n)]
    elif gpus > 0:
        devices = [torch.device(f"cuda:{i % gpus}") for i in range(n)]
    else:
        devices = [torch.device("cpu")] * n
    if verbose:
        say(describe_devices(devices))
    return devices


def as_devices(devices: Sequence[Device]) -> list[torch.device]:
    """``devices`` as ``torch.device``; integers are GPU indices (``device_ids``)."""
    out = []
    for d in _device_list(devices):
        if d.type == "cuda" and d.index is None:  # "cuda" means the current GPU
            d = torch.device("cuda", torch.cuda.current_device())
        out.append(d)
    return out


def _device_list(devices: Sequence[Device]) -> list[torch.device]:
    if devices is None or isinstance(devices, (str, int, torch.device)) or len(devices) == 0:
        raise ValueError(
            f"need at least one device, got {devices!r}: pass a list, e.g. try_devices(2) "
            "or GPU indices such as [0, 1]"
        )
    return [_as_device(d) for d in devices]


def _as_device(d: Device) -> torch.device:
    try:
        return torch.device("cuda", d) if isinstance(d, int) else torch.device(d)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"{d!r} is not a device: give 'cpu', 'cuda:0', a torch.device or a GPU index"
        ) from err


def model_device(net: torch.nn.Module) -> torch.device:
    """Where ``net`` computes: the device of its first parameter (or buffer); else the CPU.

    Functions that take a model move their inputs here, as d2l's helpers do,
    so no caller has to remember to.
    """
    if not isinstance(net, torch.nn.Module):  # (checks.py imports this module's users)
        raise TypeError(f"net must be a torch.nn.Module (a model), got {type(net).__name__}")
    for t in net.parameters():
        return t.device
    for t in net.buffers():
        return t.device
    return torch.device("cpu")


def gpu_indices(devices: Sequence[Device]) -> list[int]:
    """The GPU indices among ``devices`` (for ``torch.random.fork_rng(devices=...)``)."""
    return [d.index or 0 for d in as_devices(devices) if d.type == "cuda"]


def synchronize(device: Device | None = None) -> None:
    """Wait for all queued work on ``device``; a no-op on the CPU.

    CUDA kernels run asynchronously: a timer read right after launching them
    measures the launch, not the work.
    """
    device = _as_device(device) if device is not None else None
    if device is None or device.type == "cuda":
        if torch.cuda.is_available():
            torch.cuda.synchronize(device)


def synchronize_all(devices: Sequence[Device]) -> None:
    """:func:`synchronize` every distinct device of ``devices``."""
    for d in dict.fromkeys(_device_list(devices)):
        synchronize(d)


def describe_devices(devices: list[torch.device]) -> str:
    """One truthful line about a device list: how many are real, how many virtual."""
    devices = _device_list(devices)
    names = [str(d) for d in devices]
    distinct = sorted(set(names), key=names.index)
    n = len(devices)
    if len(distinct) == n:
        kind = "GPU" if devices[0].type == "cuda" else "device"
        return f"{n} real {kind}{'s' if n > 1 else ''}: {', '.join(names)}"
    where = " and ".join(distinct)
    if devices[0].type == "cpu":
        return (
            f"no GPU: {n} virtual devices on the CPU (results match {n} real devices; "
            f"timings do not)"
        )
    return (
        f"{n} virtual devices on {len(distinct)} "
        f"GPU{'s' if len(distinct) > 1 else ''} ({where}): "
        f"results match {n} real devices; timings do not"
    )


def is_virtual(n: int, device: Device) -> bool:
    """Whether ``n`` devices (or processes) computing on ``device``'s kind are virtual:
    more than one on the CPU, or more than the GPUs here (the same GPU named again)."""
    if type(n) is not int or n < 1:
        raise ValueError(f"need a device count >= 1, got {n!r}")
    return n > (1 if _as_device(device).type == "cpu" else max(1, gpu_count()))


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS reports one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def hardware_label() -> str:
    """A short label of the hardware that produced a number, e.g. for plot titles.

    ``"1x NVIDIA H100 80GB HBM3"`` with GPUs, ``"CPU, 2 cores (x86_64)"`` without.
    """
    gpus = gpu_count()
    if gpus:
        names = [torch.cuda.get_device_name(i) for i in range(gpus)]
        if len(set(names)) == 1:
            return f"{gpus}x {names[0]}"
        return ", ".join(names)
    return cpu_label()


def cpu_label() -> str:
    """The CPU's part of :func:`hardware_label`, for work that ran on CPU processes even on a
    machine with GPUs: ``"CPU, 2 cores (x86_64)"``."""
    cores = cpu_cores()
    return f"CPU, {cores} core{'s' if cores != 1 else ''} ({platform.machine()})"
