"""Helpers for the pitfalls of ``nn.DataParallel``: devices, saving, memory, losses.

Used in: chapter 4 (saving and loading again in chapter 5).

* ``CUDA_VISIBLE_DEVICES`` renumbers GPUs: :func:`physical_gpu_ids` reads the
  mapping from the variable, :func:`visible_devices_in_subprocess` shows what a
  process started with it sees.
* A wrapped model's ``state_dict`` keys start with ``module.``:
  :mod:`companion.runtime.checkpoint` (``unwrap``, ``load_into``, ``save_checkpoint``,
  ``load_checkpoint``) saves and loads the plain model's keys, wrapped or not.
* The output device holds more memory: :func:`output_device_bytes` counts
  what only it holds, from tensor sizes; :func:`peak_memory_per_device`
  measures it on two or more GPUs.
* A loss computed inside the module comes back as one value per replica
  (:class:`NetWithLoss`); :func:`global_mean` weights them by chunk size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..core.checks import check_int, check_module, check_positive
from ..core.devices import as_devices
from ..runtime.checkpoint import unwrap

__all__ = [
    "physical_gpu_ids",
    "visible_devices_in_subprocess",
    "output_device_bytes",
    "peak_memory_per_device",
    "NetWithLoss",
    "global_mean",
]


def physical_gpu_ids(value: str | None = None, n_physical: int | None = None) -> list[str] | None:
    """The physical GPUs behind indices 0, 1, ... as ``CUDA_VISIBLE_DEVICES`` sets them.

    ``value`` defaults to the variable of this process; ``None`` when it is
    unset (every GPU, in the driver's order). Entries are indices or UUIDs
    (``GPU-...``, ``MIG-...``). As CUDA documents, the list ends at the first
    invalid entry: ``"0,2,-1,1"`` makes GPUs 0 and 2 visible, as devices 0 and 1.
    With ``n_physical``, indices from ``n_physical`` on are invalid too.
    """
    _check_visible(value, n_physical)
    if value is None:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return None
    ids: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.startswith(("GPU-", "MIG-")):
            pass
        elif not (entry.isascii() and entry.isdigit()) or (
            n_physical is not None and int(entry) >= n_physical
        ):
            break
        else:
            entry = str(int(entry))
        _check_listed_once(entry, ids, value)
        ids.append(entry)
    return ids


_CHILD = """
import json, os, torch
n = torch.cuda.device_count()
print(json.dumps({"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "device_count": n,
                  "names": [torch.cuda.get_device_name(i) for i in range(n)]}))
"""


def visible_devices_in_subprocess(value: str, timeout: float = 120) -> dict:
    """What a new Python process started with ``CUDA_VISIBLE_DEVICES=value`` sees.

    The variable is read once, when CUDA initialises, so it must be set before
    that: a new process is the reliable way. Returns the child's
    ``torch.cuda.device_count()``, device names, and the physical ids behind
    its indices (:func:`physical_gpu_ids`). The child is killed after ``timeout`` s.
    """
    _check_visible(value, None, required=True, timeout=timeout)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": value}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:
        raise TimeoutError(f"the child process did not answer within {timeout} s") from err
    if done.returncode != 0:
        raise RuntimeError(f"the child process failed:\n{done.stderr[-2000:]}")
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    seen["physical_ids"] = physical_gpu_ids(value)
    return seen


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def output_device_bytes(outputs: Sequence[torch.Tensor], net: nn.Module) -> dict[str, int]:
    """Bytes of a training step that only the output device holds, from tensor sizes.

    For the replicas' output chunks ``outputs`` and the wrapped model ``net``
    (default output device, ``device_ids[0]``): the gathered output, its
    gradient in backward, and the summed parameter gradients (``net``'s ``.grad``,
    which outlive the step; other devices' gradients are freed after the sum).
    """
    check_module(net, "net")
    out = sum(_nbytes(o) for o in outputs)
    grads = sum(_nbytes(p) for p in unwrap(net).parameters() if p.requires_grad)
    return {
        "gathered output": out,
        "gradient of the gathered output": out,
        "summed parameter gradients": grads,
    }


def peak_memory_per_device(
    net: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    device_ids: Sequence[int],
    steps: int = 3,
) -> list[int]:
    """Peak bytes allocated on each GPU during ``steps`` ``nn.DataParallel`` SGD steps.

    Needs two or more GPUs. ``net`` is moved to ``device_ids[0]``; the batch is
    put there too, as a training loop does before calling the wrapper.
    """
    devices = as_devices(device_ids)
    _check_distinct_gpus(devices)
    dp_net = nn.DataParallel(net.to(devices[0]), device_ids=devices)
    opt = torch.optim.SGD(dp_net.parameters(), lr=0.01)
    X, y = X.to(devices[0]), y.to(devices[0])
    for d in devices:
        torch.cuda.synchronize(d)
        torch.cuda.reset_peak_memory_stats(d)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(dp_net(X), y).backward()
        opt.step()
    for d in devices:
        torch.cuda.synchronize(d)
    return [torch.cuda.max_memory_allocated(d) for d in devices]


class NetWithLoss(nn.Module):
    """``net`` followed by ``loss``: ``forward(X, y)`` returns ``loss(net(X), y)``.

    Wrapping this (instead of ``net``) computes the loss on each replica. With a
    mean loss each replica returns a scalar, and the gather returns one mean per
    replica: average them with :func:`global_mean`, or use
    ``reduction="none"`` and take the mean of the gathered per-sample losses.
    """

    def __init__(self, net: nn.Module, loss: Callable[..., torch.Tensor] | None = None):
        super().__init__()
        _check_net_with_loss(net, loss)
        self.net = net
        self.loss = loss or nn.CrossEntropyLoss()

    def forward(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.net(X), y)


def global_mean(means: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """The mean over the whole batch from per-replica means of ``sizes`` samples each.

    ``means.mean()`` gives each replica the same weight, which is wrong when the
    chunks differ in size (``chunk_sizes(10, 3) == [4, 4, 2]``).
    """
    _check_means(means, sizes)
    weights = torch.as_tensor(sizes, dtype=means.dtype, device=means.device)
    return (means * weights).sum() / weights.sum()


def _check_listed_once(entry: str, ids: list[str], value: str) -> None:
    if entry in ids:
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES={value!r} lists GPU {entry} twice: list each GPU once"
        )


def _check_distinct_gpus(devices: list[torch.device]) -> None:
    if (
        len(devices) < 2
        or any(d.type != "cuda" for d in devices)
        or len(set(devices)) < len(devices)
    ):
        raise ValueError(
            f"peak_memory_per_device needs two or more distinct GPUs, got {devices}; "
            f"on a machine without them use output_device_bytes"
        )


def _check_means(means: torch.Tensor, sizes: Sequence[int]) -> None:
    if means.dim() != 1 or len(means) != len(sizes):
        raise ValueError(
            f"need one mean per replica: {tuple(means.shape)} means for {len(sizes)} sizes"
        )
    for i, n in enumerate(sizes):
        check_int(n, f"sizes[{i}]", 0, "give the number of samples behind each mean")
    if sum(sizes) < 1:
        raise ValueError(
            f"sizes must add up to at least one sample, got {list(sizes)}: give "
            f"the number of samples behind each mean"
        )


def _check_visible(value, n_physical, required: bool = False, timeout: float = 1) -> None:
    check_positive(timeout, "timeout", "give the seconds the child may take")
    if not isinstance(value, str) and (required or value is not None):
        raise TypeError(
            f"value must be a CUDA_VISIBLE_DEVICES string such as '0,1' or 'GPU-...', got "
            f"{value!r}" + ("" if required else ", or None to read this process's variable")
        )
    if n_physical is not None:
        check_int(n_physical, "n_physical", 0, "the number of GPUs in the machine")


def _check_net_with_loss(net, loss) -> None:
    check_module(net, "net")
    if loss is not None and not callable(loss):
        raise TypeError(
            f"loss must be a function of (output, y), e.g. nn.CrossEntropyLoss(), got {loss!r}"
        )
