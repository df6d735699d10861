"""The patterns that chapter 6's drop-in table runs: small float64 models and their steps.

Used in: chapter 6, through :mod:`.dropin`.

Each case of :data:`CASES` is a way of driving torch's DDP that torch
allows (or refuses): a model, the kind of input each rank feeds it (its
values differ from rank to rank, so that an averaged gradient differs from
a local one), whether ``find_unused_parameters`` is on, and the steps.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["CASES"]


class _Two(nn.Module):
    """Two one-weight layers ``a`` and ``b``; ``forward`` can skip ``a`` or return them apart.

    ``spare``: one more parameter that no forward pass uses (for the cases with
    ``find_unused_parameters``, where torch's DDP warns if nothing is unused).
    """

    def __init__(self, spare: bool = False):
        super().__init__()
        self.a, self.b = nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)
        if spare:
            self.spare = nn.Parameter(torch.zeros(1))

    def forward(self, x, use_a: bool = True, apart: bool = False):
        if apart:
            return self.a(x), self.b(x)
        return (self.a(x) if use_a else 0) + self.b(x)


def _Spare() -> _Two:
    return _Two(spare=True)


@dataclasses.dataclass
class _Heads:  # a model output that is a dataclass: no pytree node, torch's DDP looks inside
    first: torch.Tensor
    second: torch.Tensor


class _DataclassOut(_Two):
    def forward(self, x):  # the two layers' outputs apart, in a dataclass
        return _Heads(self.a(x), self.b(x))


class _Trunk(nn.Module):
    """A shared trunk and two heads, returned apart; ``reentrant`` checkpoints the trunk."""

    def __init__(self, reentrant: bool | None = None):
        super().__init__()
        self.trunk, self.reentrant = nn.Linear(2, 2, bias=False), reentrant
        self.h1, self.h2 = nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)

    def forward(self, x):
        h = (
            self.trunk(x)
            if self.reentrant is None
            else checkpoint(self.trunk, x, use_reentrant=True)
        )
        return self.h1(torch.tanh(h)), self.h2(torch.tanh(h))


def _TiedPair() -> nn.Sequential:
    """Two layers that share one weight (torch's ``test_ddp_checkpointing_weight_sharing``)."""
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    first.weight = second.weight
    return nn.Sequential(first, second)


class _NoInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))

    def forward(self):  # each rank's own gradient
        return (self.w * (dist.get_rank() + 1.0)).sum()


def _accumulated_then_unused(net, x):
    with net.no_sync():
        net(x, True).sum().backward()  # a is used here ...
    net(x, False).sum().backward()  # ... and not in the synchronised micro-step


def _unused_everywhere(net, x):
    net(x).sum().backward()
    net(x, False).sum().backward()  # a: no rank used it in this step


def _nested_no_sync(net, x):
    with net.no_sync():
        with net.no_sync():
            pass
        net(x).sum().backward()  # still inside the outer block: local


def _sync_attribute(net, x):
    net.require_backward_grad_sync = False  # nanoGPT's accumulation, without no_sync()
    net(x).sum().backward()  # local: nothing sent
    net.require_backward_grad_sync = True


def _two_forwards(net, x):
    (net(x) + net(x)).sum().backward()


def _ignored_output(net, x):
    net(x), net(x).sum().backward()


def _metric_with_autograd(net, x):
    net(x).sum().backward()
    net(x)  # a metric, computed with autograd on
    net(x).sum().backward()


def _checkpointed_wrapper(net, x):
    checkpoint(net, x, use_reentrant=False).sum().backward()


def _reentrant_wrapper(net, x):
    checkpoint(net, x, use_reentrant=True).sum().backward()  # forward first under no_grad


def _two_backwards(net, x):
    out_a, out_b = net(x, apart=True)
    out_a.sum().backward()
    out_b.sum().backward()


def _two_backwards_shared(net, x):
    out_1, out_2 = net(x)
    out_1.sum().backward(retain_graph=True)
    out_2.sum().backward()


def _summed(net, x):
    sum(out.sum() for out in net(x)).backward()


def _sparse(net, x):
    net(x).sum().backward()


def _dataclass(net, x):
    out = net(x)
    (out.first.sum() + 2 * out.second.sum()).backward()


def _create_graph(net, x):
    (net(x) ** 2).sum().backward(create_graph=True)


def _through_module(net, x):
    net(x).sum().backward()  # a proper step, then a backward through the model itself
    net.module(x).sum().backward()


def _no_input(net, x):
    net().backward()


# name: (what the pattern is, model, input kind, find_unused_parameters, the steps). Each
# case ends with the next step's forward pass, but create_graph: torch's DDP refuses any
# forward pass while .grad holds a graph.
CASES: dict[str, tuple] = {
    "accumulate, then unused": (
        "a parameter used under no_sync(), unused in the step that syncs",
        _Spare,
        "dense",
        True,
        _accumulated_then_unused,
    ),
    "unused by every rank": (
        "a parameter no rank used in this step keeps its .grad",
        _Spare,
        "dense",
        True,
        _unused_everywhere,
    ),
    "nested no_sync": (
        "no_sync() inside no_sync(): the outer block still holds",
        _Two,
        "dense",
        False,
        _nested_no_sync,
    ),
    "require_backward_grad_sync": (
        "require_backward_grad_sync = False set by hand (nanoGPT): no_sync() without with",
        _Two,
        "dense",
        False,
        _sync_attribute,
    ),
    "output ignored": (
        "a forward pass whose output is not used",
        _Two,
        "dense",
        False,
        _ignored_output,
    ),
    "two forwards": (
        "two forward passes, one backward through both",
        _Two,
        "dense",
        False,
        _two_forwards,
    ),
    "metric with autograd": (
        "a forward pass between steps, autograd on",
        _Two,
        "dense",
        False,
        _metric_with_autograd,
    ),
    "checkpointed wrapper": (
        "torch.utils.checkpoint (non-reentrant) around the wrapper",
        _Two,
        "dense",
        False,
        _checkpointed_wrapper,
    ),
    "reentrant checkpointed wrapper": (
        "reentrant torch.utils.checkpoint around the wrapper, a weight tied",
        _TiedPair,
        "grad",
        False,
        _reentrant_wrapper,
    ),
    "two backwards": (
        "two backward passes, each through its own parameters",
        _Two,
        "dense",
        False,
        _two_backwards,
    ),
    "two backwards, shared": (
        "two backward passes through the same parameters",
        _Trunk,
        "dense",
        False,
        _two_backwards_shared,
    ),
    "reentrant checkpoint": (
        "reentrant torch.utils.checkpoint inside the model",
        lambda: _Trunk(reentrant=True),
        "grad",
        False,
        _summed,
    ),
    "create_graph": (
        "backward(create_graph=True), one weight (torch's DDP refuses two)",
        lambda: nn.Linear(2, 1, bias=False),
        "dense",
        False,
        _create_graph,
    ),
    "sparse gradients": (
        "nn.Embedding(sparse=True)",
        lambda: nn.Embedding(4, 2, sparse=True),
        "index",
        False,
        _sparse,
    ),
    "sparse bags": (
        "nn.EmbeddingBag(sparse=True)",
        lambda: nn.EmbeddingBag(4, 2, sparse=True),
        "bags",
        False,
        _sparse,
    ),
    "dataclass output": (
        "forward returns a dataclass of tensors",
        lambda: _DataclassOut(spare=True),
        "dense",
        True,
        _dataclass,
    ),
    "no positional input": ("forward() takes no argument", _NoInput, "none", False, _no_input),
    "backward through .module": (
        "the model used directly: nothing is communicated",
        _Two,
        "dense",
        False,
        _through_module,
    ),
}
