"""Chapter 2's exercise checkers: a split step's gradient and a split by speed.

* ``check_forward_backward(fn)``: your ``forward_backward`` (same arguments as
  ``companion.split.forward_backward``), followed by the chapter's
  ``allreduce_grads``, must give one device's gradient of the mean loss, in
  float64, for even and uneven shards on 1 to 4 devices (exercise 2).
* ``check_shard_sizes(fn)``: your ``fn(batch_size, speeds) -> sizes`` must split
  every sample once into whole shards, each within one sample of its share
  ``batch * speed / sum(speeds)`` (exercise 3; whether the loss weighting still
  gives the gradient of the mean loss is the exercise's question:
  ``check_forward_backward`` runs any sizes ``split_batch`` makes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from companion.core import get_model
from companion.split import allreduce_grads, copy_replicas, forward_backward, split_batch

from .verdicts import Verdicts, attempt

__all__ = ["check_forward_backward", "check_shard_sizes"]

CASES = ((8, 1), (8, 2), (8, 4), (7, 2), (7, 3), (5, 4), (6, 4))  # (batch, devices)
SPEEDS = ((256, (2, 1)), (6, (1, 1, 1, 1)), (7, (1, 2, 4)), (100, (3, 1, 1)), (10, (1, 1e-3)))


def _model_and_batch(batch: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = get_model("lenet").double()
    g = torch.Generator().manual_seed(batch)
    X = torch.randn(batch, 1, 28, 28, generator=g, dtype=torch.float64)
    return net, X, torch.randint(0, 10, (batch,), generator=g)


def _one_device(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    net.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(X), y).backward()
    return [p.grad.clone() for p in net.parameters()]


def _same(replica: nn.Module, expected: list[torch.Tensor]) -> bool:
    grads = [p.grad for p in replica.parameters()]
    return all(
        g is not None and torch.allclose(g, e, rtol=1e-9, atol=1e-12)
        for g, e in zip(grads, expected)
    )


def _split_step(fn: Callable, net, X_shards, y_shards) -> nn.Module:
    replicas = copy_replicas(net, [torch.device("cpu")] * len(X_shards))
    fn(
        replicas,
        X_shards,
        y_shards,
        sum(len(y) for y in y_shards),
        nn.CrossEntropyLoss(reduction="none"),
    )
    allreduce_grads(replicas)
    return replicas[0]


def check_forward_backward(fn: Callable = forward_backward, quiet: bool = False) -> Verdicts:
    """Your ``forward_backward``, summed by ``allreduce_grads``, against one device."""
    verdicts = Verdicts(
        f"{getattr(fn, '__name__', 'fn')} + allreduce_grads against one "
        "device's gradient of the mean loss (LeNet, float64)",
        quiet,
    )
    for batch, n in CASES:
        net, X, y = _model_and_batch(batch)
        expected = _one_device(net, X, y)
        X_shards, y_shards = split_batch(X, y, [torch.device("cpu")] * n)
        sizes = ", ".join(str(len(s)) for s in y_shards)
        step, problem = attempt(_split_step, fn, net, X_shards, y_shards)
        if not problem and not _same(step, expected):
            problem = "a gradient differs from one device's"
        verdicts.add(f"batch {batch} on {n} device(s), shards {sizes}", not problem, problem)
    return verdicts


def _proportional(sizes, batch: int, speeds: Sequence[float]) -> bool:
    shares = [batch * s / sum(speeds) for s in speeds]
    return all(abs(n - share) < 1 for n, share in zip(sizes, shares))


def _shard_problem(sizes, batch: int, speeds: Sequence[float]) -> str:
    """What is wrong with ``sizes`` for ``batch`` samples at ``speeds`` ("" if nothing)."""
    if not (
        isinstance(sizes, (list, tuple))
        and len(sizes) == len(speeds)
        and all(isinstance(n, int) and n >= 0 for n in sizes)
    ):
        return f"want one whole size per device, got {sizes!r}"
    if sum(sizes) != batch:
        return f"{sizes} sum to {sum(sizes)}, not {batch}"
    if not _proportional(sizes, batch, speeds):
        return f"{sizes} is more than one sample from batch * speed / sum(speeds)"
    if min(sizes) > 0:  # the chapter's step on these shards
        net, X, y = _model_and_batch(batch)
        expected = _one_device(net, X, y)
        step = _split_step(forward_backward, net, list(X.split(sizes)), list(y.split(sizes)))
        if not _same(step, expected):
            return "the split step's gradient differs from one device's"
    return ""


def check_shard_sizes(fn: Callable, quiet: bool = False) -> Verdicts:
    """Your ``fn(batch_size, speeds)``: whole shards, every sample once, by speed."""
    verdicts = Verdicts(
        f"{getattr(fn, '__name__', 'fn')}(batch_size, speeds): whole shards, every sample "
        "once, in proportion to speed",
        quiet,
    )
    for batch, speeds in SPEEDS:
        sizes, problem = attempt(fn, batch, list(speeds))
        problem = problem or _shard_problem(sizes, batch, speeds)
        verdicts.add(
            f"batch {batch} at speeds ({', '.join(f'{s:g}' for s in speeds)})", not problem, problem
        )
    return verdicts
