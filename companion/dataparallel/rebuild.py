"""``nn.DataParallel`` rebuilt: scatter, replicate, parallel_apply, gather.

Used in: chapter 4.

Every call of ``nn.DataParallel(net, device_ids)`` runs four steps:

1. :func:`scatter` cuts each input tensor along dimension 0 into one chunk per
   device, with ``torch.chunk``'s sizes (:func:`chunk_sizes`);
2. :func:`replicate` makes a replica of ``net`` on each device used; the
   replicas' parameters come from differentiable copies of ``net``'s, so the
   backward pass sums every replica's gradient into ``net``'s own ``.grad``;
3. :func:`parallel_apply` calls each replica on its chunk, one thread per device;
4. :func:`gather` concatenates the outputs on the output device.

The loss is computed from the gathered output, on the output device, and
``loss.backward()`` flows back through all four steps. The replicas are made
anew at every call and thrown away; only ``net`` is updated.

:class:`DataParallelByHand` chains the four steps as ``nn.DataParallel`` does, on
GPUs and on virtual devices (``[cpu, cpu]``): the same numbers, not faster. Without
CUDA ``nn.DataParallel`` sets ``device_ids = []`` and calls the module on one device.
:mod:`companion.dataparallel.training` trains with either.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections.abc import Sequence
from itertools import chain
from typing import Any

import torch
from torch import nn

from ..core.checks import check_int, check_module, check_sequence
from ..core.devices import Device, as_devices
from ..runtime.checkpoint import register_wrapper

__all__ = [
    "check_on_first_device",
    "chunk_sizes",
    "scatter",
    "replicate",
    "ReplicaError",
    "parallel_apply",
    "GATHER_SCALAR_WARNING",
    "gather",
    "DataParallelByHand",
]

# The warning torch's Gather gives for scalar outputs, word for word.
GATHER_SCALAR_WARNING = (
    "Was asked to gather along dimension 0, but all input tensors were scalars; "
    "will instead unsqueeze and return a vector."
)


def check_on_first_device(net: nn.Module, devices: Sequence[Device], name: str = "net") -> None:
    """Raise ValueError unless ``net``'s parameters and buffers are on ``devices[0]``.

    ``nn.DataParallel`` needs the module on ``device_ids[0]`` but only finds out
    at the first forward call (a ``RuntimeError``); this check runs before wrapping.
    ``TypeError`` naming the argument ``name`` if ``net`` is not a module.
    """
    check_module(net, name)
    first = as_devices(devices)[0]
    for name, t in chain(net.named_parameters(), net.named_buffers()):
        if t.device != first:
            raise ValueError(_not_on_first(name, t.device, first))


def _not_on_first(name: str, device: torch.device, first: torch.device) -> str:
    return (
        f"{name} is on {device}, but the module must be on devices[0] = "
        f"{first} (nn.DataParallel's device_ids[0]): call net.to('{first}') "
        f"before wrapping it, or list {device} first"
    )


def chunk_sizes(batch_size: int, n_devices: int) -> list[int]:
    """The sizes ``torch.chunk`` (so ``nn.parallel.scatter``) cuts a batch into.

    Every chunk but the last has ``ceil(n / k)`` samples: ``chunk_sizes(10, 3) ==
    [4, 4, 2]``. That can give fewer chunks than devices, ``chunk_sizes(6, 4) ==
    [2, 2, 2]``, and ``nn.DataParallel`` then uses only the first three devices.
    Chapter 2's ``shard_sizes`` cuts ``[4, 3, 3]`` and ``[2, 2, 1, 1]``.
    """
    _check_chunking(batch_size, n_devices)
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def _check_chunking(batch_size: int, n_devices: int) -> None:
    check_int(n_devices, "n_devices", 1, "need at least one device")
    check_int(batch_size, "batch_size", 0, "the number of samples to scatter")
    if batch_size < 1:
        raise ValueError(f"cannot scatter a batch of {batch_size} samples: pass a non-empty batch")


def scatter(inputs: tuple, devices: Sequence[Device]) -> list[tuple]:
    """Cut each tensor of ``inputs`` along dimension 0, chunk ``i`` for ``devices[i]``.

    Returns one tuple of arguments per chunk (:func:`chunk_sizes`: possibly fewer
    than devices). Other inputs are handed to every replica as they are. The
    cut and the copies are differentiable: gradients flow back to the inputs.
    """
    devices = as_devices(devices)
    batch_size = _check_one_batch(inputs)  # the tensors' common length
    sizes = chunk_sizes(batch_size, len(devices))
    parts = [x.split(sizes) if isinstance(x, torch.Tensor) else [x] * len(sizes) for x in inputs]
    return [
        tuple(p.to(d, non_blocking=True) if isinstance(p, torch.Tensor) else p for p in args)
        for args, d in zip(zip(*parts), devices)
    ]


def _check_one_batch(inputs: tuple) -> int:
    check_sequence(inputs, "inputs", "the forward call's arguments, e.g. (X,)")
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if not tensors or any(t.dim() == 0 for t in tensors):
        raise ValueError("scatter needs inputs with a batch dimension: tensors of shape (N, ...)")
    lengths = sorted({len(t) for t in tensors})
    if len(lengths) > 1:
        raise ValueError(
            f"the input tensors have different batch sizes {lengths}: their chunks "
            f"would not line up; pass tensors of one minibatch"
        )
    return lengths[0]


def replicate(net: nn.Module, devices: Sequence[Device], detach: bool = False) -> list[nn.Module]:
    """One replica of ``net`` per device: shallow module copies with their own tensors.

    Parameters: replica 0 uses views of ``net``'s parameters, the others copies made
    with ``Tensor.to(copy=True)``. Neither is a leaf, so autograd adds every replica's
    gradient into ``net``'s ``.grad``: the sum torch's ``Broadcast`` / ``ReduceAddCoalesced``
    compute. ``detach=True`` (``nn.DataParallel`` without gradients) makes plain copies.

    Buffers: replica 0 holds ``net``'s own tensors, the others detached copies.
    In-place updates during forward, such as BatchNorm's running statistics,
    therefore reach ``net`` only from replica 0, that is from the first chunk.
    Replicas own no ``nn.Parameter`` (``replica.parameters()`` is empty), and
    attributes a forward call changes on them are lost with them.
    """
    devices = as_devices(devices)
    check_on_first_device(net, devices)
    replicas = []
    for i, device in enumerate(devices):
        copies = {}  # module of net -> its copy on this device
        for module in net.modules():
            r = copy.copy(module)  # a new object holding the same attributes
            r._parameters, r._buffers = {}, dict(module._buffers)
            r._modules = dict(module._modules)
            copies[module] = r
        for module, r in copies.items():
            for name, child in module._modules.items():
                r._modules[name] = None if child is None else copies[child]
            for name, p in module._parameters.items():
                if p is not None:
                    p = p.detach() if detach else p
                    p = p.view_as(p) if i == 0 else p.to(device, copy=True)
                setattr(r, name, p)  # a plain tensor attribute, not a Parameter
            for name, b in module._buffers.items():
                if b is not None and i > 0:
                    r._buffers[name] = b.detach().to(device, copy=True)
        replicas.append(copies[net])
    return replicas


class ReplicaError(RuntimeError):
    """An exception raised in a replica's thread, re-raised in the caller's thread."""

    def __init__(self, i: int, device: torch.device, err: BaseException):
        super().__init__(f"replica {i} on device {device} raised {type(err).__name__}: {err}")


def _as_caller(device: torch.device, stream, grad: bool, cast: tuple) -> contextlib.ExitStack:
    """What a replica's thread takes over from the caller: grad mode and autocast (both
    per thread) and, on a GPU, the current device and stream."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.set_grad_enabled(grad))
    stack.enter_context(torch.autocast(device.type, dtype=cast[1], enabled=cast[0]))
    if device.type == "cuda":
        stack.enter_context(torch.cuda.device(device))
        stack.enter_context(torch.cuda.stream(stream))
    return stack


def parallel_apply(
    replicas: Sequence[nn.Module], inputs: Sequence[tuple], devices: Sequence[Device]
) -> list[Any]:
    """``replicas[i](*inputs[i])`` for each ``i``, one thread each; outputs in order.

    Each thread runs as the caller does (``_as_caller``). An exception in a
    thread is re-raised here as :class:`ReplicaError`, naming the replica and its
    device, with the original chained to it.
    """
    devices = as_devices(devices)
    _check_one_each(replicas, inputs, devices)
    grad = torch.is_grad_enabled()
    casts = [(torch.is_autocast_enabled(d.type), torch.get_autocast_dtype(d.type)) for d in devices]
    streams = [torch.cuda.current_stream(d) if d.type == "cuda" else None for d in devices]
    outputs: list[Any] = [None] * len(replicas)
    errors: list[BaseException | None] = [None] * len(replicas)

    def work(i: int) -> None:
        try:
            with _as_caller(devices[i], streams[i], grad, casts[i]):
                outputs[i] = replicas[i](*inputs[i])
        except Exception as err:  # re-raised below, in the caller's thread
            errors[i] = err

    if len(replicas) == 1:
        work(0)
    else:
        threads = [
            threading.Thread(target=work, args=(i,), name=f"replica {i} on {d}")
            for i, d in enumerate(devices)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i, err in enumerate(errors):
        if err is not None:
            raise ReplicaError(i, devices[i], err) from err
    return outputs


def _check_one_each(replicas: Sequence, inputs: Sequence, devices: Sequence) -> None:
    if not len(replicas) == len(inputs) == len(devices):
        raise ValueError(
            f"{len(replicas)} replicas, {len(inputs)} inputs and {len(devices)} "
            f"devices: pass one input and one device per replica"
        )


def gather(outputs: Sequence[Any], output_device: Device) -> Any:
    """Concatenate the replicas' outputs along dimension 0 on ``output_device``.

    Tuples, lists and dicts are gathered entry by entry. Scalars (such as a loss
    computed inside the module) cannot be concatenated: like torch, ``gather``
    then warns and returns a vector with one value per replica.
    """
    check_sequence(outputs, "outputs", "one output per replica, from parallel_apply", 1)
    out, device = outputs[0], as_devices([output_device])[0]
    if isinstance(out, torch.Tensor):
        if all(o.dim() == 0 for o in outputs):
            warnings.warn(GATHER_SCALAR_WARNING, UserWarning, stacklevel=2)
            outputs = [o.view(1) for o in outputs]
        return torch.cat([o.to(device) for o in outputs])
    if out is None:
        return None
    if isinstance(out, dict):
        return type(out)((k, gather([o[k] for o in outputs], device)) for k in out)
    if isinstance(out, (tuple, list)):
        parts = [gather(list(p), device) for p in zip(*outputs)]
        return type(out)(*parts) if hasattr(out, "_fields") else type(out)(parts)
    raise TypeError(
        f"cannot gather outputs of type {type(out).__name__}: "
        f"return tensors, or tuples, lists or dicts of tensors"
    )


@register_wrapper
class DataParallelByHand(nn.Module):
    """``nn.DataParallel`` from the four steps; on GPUs and on virtual devices.

    ``module`` must already be on ``devices[0]`` (checked here, and at every call
    as ``nn.DataParallel`` does); the output lands on ``output_device`` (default
    ``devices[0]``). As in ``nn.DataParallel``: with one device the module is
    called directly; a batch of fewer chunks than devices runs on the first
    ones; the module is ``self.module``, so ``state_dict`` keys start with
    ``module.``. Keyword arguments are not supported (torch scatters them too).
    """

    def __init__(
        self,
        module: nn.Module,
        devices: Sequence[Device],
        output_device: Device | None = None,
    ):
        super().__init__()
        self.devices = as_devices(devices)
        check_on_first_device(module, self.devices, "module")
        self.module = module
        out = self.devices[0] if output_device is None else output_device
        self.output_device = as_devices([out])[0]

    def forward(self, *inputs: Any) -> Any:
        check_on_first_device(self.module, self.devices)
        chunks = scatter(inputs, self.devices)
        if len(self.devices) == 1:
            return self.module(*chunks[0])
        used = self.devices[: len(chunks)]
        replicas = replicate(self.module, used, detach=not torch.is_grad_enabled())
        return gather(parallel_apply(replicas, chunks, used), self.output_device)
