"""Chapter 4's exercise checker: a ``scatter`` of your own inside the wrapper's step.

``check_scatter(fn)`` calls ``fn(inputs, devices)`` (the arguments of
``companion.dataparallel.scatter``) on batches of 6, 7, 2 and 256 samples over 3
or 4 virtual CPU devices, and checks that the pieces hold every sample once, in
order, one tuple of arguments per device used, each on its device. Then it runs
the wrapper's step on those pieces (``replicate``, ``parallel_apply``, ``gather``,
the loss, backward) and compares the gradient with one device's, in float64
(exercise 4). It prints the piece sizes: how many devices each batch used.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from companion.core import get_model
from companion.dataparallel import gather, parallel_apply, replicate, scatter

from .verdicts import Verdicts, attempt

__all__ = ["check_scatter"]

CASES = ((6, 4), (7, 3), (2, 4), (256, 4))  # (batch, devices)


def _pieces_problem(pieces, X: torch.Tensor, y: torch.Tensor, devices) -> str:
    """What is wrong with ``pieces`` of ``(X, y)`` over ``devices`` ("" if nothing)."""
    if not (
        isinstance(pieces, (list, tuple))
        and 0 < len(pieces) <= len(devices)
        and all(isinstance(p, tuple) and len(p) == 2 for p in pieces)
        and all(torch.is_tensor(t) for p in pieces for t in p)
    ):
        return "want a list of (X_i, y_i) tuples of tensors, at most one per device"
    for i, (X_i, y_i) in enumerate(pieces):
        if X_i.device != devices[i] or y_i.device != devices[i]:
            return f"piece {i} is not on {devices[i]}"
        if len(X_i) != len(y_i):
            return f"piece {i} has {len(X_i)} inputs and {len(y_i)} labels: cut both alike"
    if not (
        torch.equal(torch.cat([p[0].cpu() for p in pieces]), X)
        and torch.equal(torch.cat([p[1].cpu() for p in pieces]), y)
    ):
        return "the pieces, put together in order, are not the batch"
    empty = [i for i, (_, y_i) in enumerate(pieces) if len(y_i) == 0]
    if empty:
        return f"piece(s) {empty} are empty: give fewer pieces than devices instead"
    return ""


def _step_grads(net: nn.Module, pieces, X, y, devices) -> list[torch.Tensor]:
    net.zero_grad(set_to_none=True)
    if pieces is None:  # one device
        out = net(X)
    else:
        used = devices[: len(pieces)]
        inputs = [(X_i,) for X_i, _ in pieces]  # the model takes X
        out = gather(parallel_apply(replicate(net, used), inputs, used), devices[0])
        y = torch.cat([y_i.to(devices[0]) for _, y_i in pieces])  # the labels as cut
    nn.functional.cross_entropy(out, y).backward()
    return [p.grad.clone() for p in net.parameters()]


def check_scatter(fn: Callable = scatter, quiet: bool = False) -> Verdicts:
    """Your ``fn(inputs, devices)``: every sample once, on its device, and the wrapper's
    gradient one device's (LeNet, float64, virtual CPU devices)."""
    verdicts = Verdicts(
        f"{getattr(fn, '__name__', 'fn')}((X, y), devices) in the wrapper's step "
        "against one device (LeNet, float64)",
        quiet,
    )
    for batch, n in CASES:
        torch.manual_seed(0)
        net = get_model("lenet").double()
        g = torch.Generator().manual_seed(batch)
        X = torch.randn(batch, 1, 28, 28, generator=g, dtype=torch.float64)
        y = torch.randint(0, 10, (batch,), generator=g)
        devices = [torch.device("cpu")] * n
        pieces, problem = attempt(fn, (X, y), devices)
        problem = problem or _pieces_problem(pieces, X, y, devices)
        if not problem:
            expected = _step_grads(net, None, X, y, devices)
            got = _step_grads(net, pieces, X, y, devices)
            if not all(torch.allclose(a, b, rtol=1e-9, atol=1e-12) for a, b in zip(got, expected)):
                problem = "a gradient differs from one device's"
        sizes = "" if problem else f", pieces of {', '.join(str(len(p[1])) for p in pieces)}"
        verdicts.add(f"batch {batch} over {n} devices{sizes}", not problem, problem)
    return verdicts
