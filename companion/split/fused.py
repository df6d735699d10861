"""The step of :mod:`companion.split.naive` in fewer operations: same numbers, less overhead.

Used in: chapter 2.

:func:`companion.split.naive.train_batch` launches one small operation after another:
one backward call per device, and, for every parameter, one addition or copy
per replica in the all-reduce and one update per replica. On a small model the
time to launch those operations is a sizeable part of the step. This version
changes three things and nothing in the arithmetic:

1. one backward call for the losses of all devices (on several GPUs, PyTorch's
   autograd engine then runs each GPU's backward work on a thread of its own);
2. the all-reduce with multi-tensor ("foreach") operations: one call adds all
   gradients of a replica into the first replica's, one call copies them back;
3. the update with one multi-tensor call per replica, as ``torch.optim.SGD``
   does by default for CUDA tensors (on the CPU its default uses neither
   foreach nor fused kernels).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from ..core.checks import check_sequence
from ..core.training import check_lr
from .naive import Loss, _check_split_step, shard_loss, train_batch

__all__ = [
    "forward_backward_once",
    "allreduce_grads_foreach",
    "sgd_foreach",
    "train_batch_foreach",
]


def forward_backward_once(
    replicas: Sequence[nn.Module],
    X_shards: Sequence[torch.Tensor],
    y_shards: Sequence[torch.Tensor],
    batch_size: int,
    loss: Loss,
) -> list[torch.Tensor]:
    """Like ``naive.forward_backward``, with one backward call for all devices."""
    _check_split_step(replicas, X_shards, y_shards, batch_size)
    losses = [
        shard_loss(net, X_i, y_i, batch_size, loss)
        for net, X_i, y_i in zip(replicas, X_shards, y_shards)
    ]
    torch.autograd.backward(losses)
    return [part.detach() for part in losses]


@torch.no_grad()
def allreduce_grads_foreach(replicas: Sequence[nn.Module]) -> None:
    """Like ``naive.allreduce_grads``, with two multi-tensor calls per extra replica."""
    check_sequence(replicas, "replicas", "models, one per device", 1)
    grads = [[p.grad for p in net.parameters() if p.grad is not None] for net in replicas]
    _check_own_memory(grads)
    first = grads[0]
    for g in grads[1:]:  # reduce into the first replica's gradients
        torch._foreach_add_(first, [t.to(first[0].device) for t in g])
    for g in grads[1:]:  # broadcast the sums back, in place
        torch._foreach_copy_(g, first)


@torch.no_grad()
def sgd_foreach(params: Iterable[nn.Parameter], lr: float) -> None:
    """Like ``naive.sgd``, ``p -= lr * p.grad``, in one multi-tensor call."""
    check_lr(lr)
    params = [p for p in params if p.grad is not None]
    if not params:
        return
    torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)
    for p in params:
        p.grad = None


def train_batch_foreach(
    X: torch.Tensor,
    y: torch.Tensor,
    replicas: Sequence[nn.Module],
    devices: Sequence[torch.device],
    lr: float,
    loss: Loss | None = None,
) -> torch.Tensor:
    """``naive.train_batch`` with the three phases above: same arguments and result."""
    return train_batch(
        X,
        y,
        replicas,
        devices,
        lr,
        loss,
        forward_backward=forward_backward_once,
        allreduce_grads=allreduce_grads_foreach,
        sgd=sgd_foreach,
    )


def _check_own_memory(grads: list[list[torch.Tensor]]) -> None:
    """``ValueError`` if two replicas' gradients share memory (empty tensors hold none)."""
    firsts = [next((t.data_ptr() for t in g if t.numel()), None) for g in grads]
    held = [ptr for ptr in firsts if ptr is not None]
    if len(set(held)) < len(held):
        raise ValueError("replicas share gradient memory: make them with copy_replicas()")
