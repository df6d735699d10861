"""Readers' answers for the exercise checkers' tests, right and wrong, in a module that
worker processes can import (as a reader's ``%%writefile my_answer.py`` would be)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _tree_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """A binomial tree onto rank 0: in step k, rank r sends to r - 2**k if bit k of r is set."""
    rank, p = dist.get_rank(), dist.get_world_size()
    k, buf = 1, torch.empty_like(tensor)
    while k < p:
        if rank % (2 * k) == k:
            dist.send(tensor, rank - k)
            break
        if rank % (2 * k) == 0 and rank + k < p:
            dist.recv(buf, rank + k)
            tensor += buf
        k *= 2
    return tensor


def tree_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """Chapter 3, exercise 4, right: the tree onto rank 0, then a broadcast."""
    dist.broadcast(_tree_reduce(tensor), 0)
    return tensor


def reduce_without_broadcast(tensor: torch.Tensor) -> torch.Tensor:
    """Wrong: the tree's sum stays on rank 0."""
    return _tree_reduce(tensor)


def no_average_prepare(net, optimizer_class, **options):
    """Wrong (chapters 6, 9): every rank steps on its own gradient, never averaged."""
    return net, optimizer_class([p for p in net.parameters() if p.requires_grad], **options)


def run_fused(spec):
    """Chapter 7, exercise 3, right: chapter 2's fused step as a study method's runner."""
    from companion.core import get_model, load_iters, set_seed
    from companion.split import train
    from companion.split.fused import train_batch_foreach

    set_seed(spec.seed)
    train_iter, test_iter = load_iters(spec.data, spec.global_batch, "cpu")
    return train(
        get_model(spec.model),
        train_iter,
        test_iter,
        ["cpu"] * spec.n_devices,
        epochs=spec.epochs,
        lr=spec.lr,
        step=train_batch_foreach,
    )


def run_fused_ten_times_the_rate(spec):
    """Wrong: a learning rate ten times the spec's."""
    from dataclasses import replace

    return run_fused(replace(spec, lr=spec.lr * 10))


def average_flat(net) -> None:
    """Chapter 3, exercise 2, right: one all-reduce of every gradient, flattened."""
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    start = 0
    for g in grads:
        g.copy_(flat[start : start + g.numel()].view_as(g))
        start += g.numel()


def sum_flat(net) -> None:
    """Wrong: the sum, not the mean."""
    for p in net.parameters():
        dist.all_reduce(p.grad)


def average_divide_first(net) -> None:
    """Right too: divide by the world size first, then all-reduce (as DDP does); its rounding
    differs from the sum's where the ranks' gradients cancel."""
    for p in net.parameters():
        p.grad /= dist.get_world_size()
        dist.all_reduce(p.grad)
