"""The pieces' step: the same gradient bits on every rank count and thread count.

Used in: chapter 11.

:class:`PieceStep` is chapter 1's step with the piece as the unit. Each of
this rank's pieces gets its own forward and backward pass, at one thread
(a piece's fp32 gradient can differ between one thread and two); the
gradients are added along the tree of :mod:`companion.samebits.tree`, the
ranks finish the tree (:mod:`companion.samebits.exchange`), and every rank
takes the same optimizer step on the same bits, at one thread too.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from .exchange import finish_tree
from .tree import PieceLoader, nodes_within, tree_sum

__all__ = ["one_thread", "Flip", "PieceStep"]


@contextlib.contextmanager
def one_thread():
    """Compute at one thread, then give the process its thread count back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    if torch.get_num_threads() != 1:  # a backend that cannot change it once started
        raise RuntimeError("torch.set_num_threads(1) did not take effect: no same bits here")
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Flip(NamedTuple):
    """A planted fault: one bit of one gradient element, on one rank, after the exchange."""

    step: int  # the global step (1, 2, ...)
    rank: int
    parameter: int  # its index among the trainable parameters (those with requires_grad)
    element: int
    bit: int  # 0-31 in fp32 (31 is the sign's), 0-63 in fp64


class PieceStep:
    """``step(net, X, y, loss_fn, optimizer)`` over the pieces of ``loader``'s layout."""

    def __init__(self, loader: PieceLoader, exchange: str = "halving", flip: Flip | None = None):
        self.loader, self.exchange, self.flip, self.steps = loader, exchange, flip, 0

    def __call__(self, net, X, y, loss_fn, optimizer) -> torch.Tensor:
        layout, piece = self.loader.layout, self.loader.piece
        lo, hi = layout.block
        params = [p for p in net.parameters() if p.requires_grad]
        losses = []

        def gradient(node):  # a piece's: its summed loss's gradient, and which were used
            if node[1] - node[0] > 1:
                return None  # add the node's children
            i = (node[0] - lo) * piece
            for p in params:
                p.grad = None
            loss = loss_fn(net(X[i : i + piece]), y[i : i + piece]) * len(y[i : i + piece])
            loss.backward()
            losses.append(loss.detach())
            return _flat(params)

        with one_thread():
            mine = [tree_sum(n, gradient) for n in nodes_within(lo, hi, layout.pieces)]
            zero = params[0].new_zeros(sum(p.numel() for p in params) + len(params))
            total = finish_tree(mine, layout.pieces, zero, self.exchange)
            self.steps += 1
            _set_grads(params, total, layout.samples, self._flip_here())
            optimizer.step()
        return sum(losses, zero.new_zeros(())) / max(len(y), 1)

    def _flip_here(self) -> Flip | None:
        flip = self.flip
        here = flip is not None and flip.step == self.steps and flip.rank == dist.get_rank()
        return flip if here else None


def _flat(params: list[nn.Parameter]) -> torch.Tensor:
    """The gradients end to end, zeros for none, then a 1 for each parameter that has one."""
    grads = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
    used = [p.new_ones(1) if p.grad is not None else p.new_zeros(1) for p in params]
    return torch.cat(grads + used)


@torch.no_grad()
def _set_grads(params, total: torch.Tensor, samples: int, flip: Flip | None) -> None:
    """Each parameter's gradient: its slice of ``total`` over the samples (None if unused)."""
    start, used = 0, (total[-len(params) :] > 0).tolist()
    for i, p in enumerate(params):
        grad = total[start : start + p.numel()].view_as(p) / samples
        start += p.numel()
        p.grad = grad if used[i] else None
        if flip is not None and flip.parameter == i:
            ints = grad.view(-1).view(torch.int32 if grad.element_size() == 4 else torch.int64)
            ints[flip.element] ^= torch.tensor(1, dtype=ints.dtype) << flip.bit
