"""The chapter's equivalence check: every method against one process, in float64.

Used in: chapter 9 (and its tests).

:func:`compare_worker` trains chapter 6's awkward model (a tied weight, a
frozen layer, an unused parameter and a buffer, :class:`TiedFrozenUnused`)
in float64 with each method on uneven local shares of the same global
batches; each rank's loss is its share of the global mean loss times ``N``,
so the ``1/N`` average of the gradients is exactly the gradient of the
global mean. :func:`one_process` trains the same model on the whole global
batch with the plain optimizer. Equal up to float64 rounding means equal.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.nn import functional as F

from ..core.checks import check_choice, check_int
from ..core.training import set_seed
from ..ddp.join import OPTIMIZERS  # the two optimizers every equivalence check steps with
from ..internals.tied_frozen_unused import TiedFrozenUnused
from ..runtime.group import rank_device
from .clip import clip_grad_norm
from .training import METHODS, full_parameters, shard

__all__ = ["OPTIMIZERS", "global_batches", "one_process", "compare_worker", "clip_norm_worker"]


def _model() -> TiedFrozenUnused:
    set_seed(0)
    return TiedFrozenUnused().double()


def global_batches(
    steps: int = 3, n: int = 11, seed: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` random global batches of ``n`` float64 images (11 splits unevenly)."""
    check_int(steps, "steps")
    check_int(n, "n", 1, "a batch needs samples")
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(n, 1, 28, 28, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (n,), generator=g),
        )
        for _ in range(steps)
    ]


def one_process(batches, optimizer="Adam", max_grad_norm: float | None = None) -> torch.Tensor:
    """The trainable parameters after one process's steps on the global batches (each
    step's gradient clipped to ``max_grad_norm`` by torch's ``clip_grad_norm_``, if given).
    ``optimizer``: a name of :data:`OPTIMIZERS`, or ``(class, options)``."""
    if not isinstance(optimizer, tuple):
        check_choice(optimizer, "optimizer", OPTIMIZERS)
    net = _model()
    cls, hp = optimizer if isinstance(optimizer, tuple) else OPTIMIZERS[optimizer]
    opt = cls([p for p in net.parameters() if p.requires_grad], **hp)
    for X, y in batches:
        F.cross_entropy(net(X), y).backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
        opt.step()
        opt.zero_grad()
    return full_parameters(net, opt)


def _share_loss(model, X: torch.Tensor, y: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """This rank's share of the global batch's mean loss, times ``N`` (weighed as above).
    With ``total``, the batch is one micro-batch of ``total`` samples: the micro-steps'
    summed, averaged gradients are then the gradient of the mean loss over all of them."""
    rank, n = dist.get_rank(), dist.get_world_size()
    X_r, y_r = X.tensor_split(n)[rank], y.tensor_split(n)[rank]
    return F.cross_entropy(model(X_r), y_r, reduction="sum") * n / (total or len(y))


def _share_step(model, optimizer, X: torch.Tensor, y: torch.Tensor, max_grad_norm=None) -> None:
    """One step on this rank's share of the global batch ``(X, y)``, weighed as above."""
    _share_loss(model, X, y).backward()
    if max_grad_norm is not None:
        clip_grad_norm(model, optimizer, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad()


def compare_worker(
    rank: int,
    world_size: int,
    batches,
    methods=METHODS,
    optimizers=tuple(OPTIMIZERS),
    max_grad_norm: float | None = None,
) -> dict[tuple[str, str], torch.Tensor]:
    """Worker: ``{(method, optimizer): whole parameters after the steps}`` on this rank
    (computed on the rank's device: a GPU under nccl), each step's gradient clipped to
    ``max_grad_norm`` by :func:`~.clip.clip_grad_norm` if given."""
    device, out = rank_device(), {}
    for method in methods:
        for optimizer in optimizers:
            cls, hp = OPTIMIZERS[optimizer]
            model, opt = shard(
                method,
                _model().to(device),
                cls,
                find_unused_parameters=True,
                bucket_cap_mb=0.001,
                **hp,
            )  # several buckets for ZeRO-2
            for X, y in batches:
                _share_step(model, opt, X.to(device), y.to(device), max_grad_norm)
            out[method, optimizer] = full_parameters(model, opt)
    return out


def clip_norm_worker(rank: int, world_size: int, batches) -> dict[tuple[str, Any], Any]:
    """Worker: the norm of the first batch's gradient that each method reports, by the
    package's :func:`~.clip.clip_grad_norm` (``False``) and by torch's
    ``clip_grad_norm_`` over the model's own parameters (``True``: torch's own function,
    unguarded); nothing is clipped. ``(method, "refused")``: what torch's function, as
    called in a training script, raised (``None``: it returned)."""
    out = {}
    for method in METHODS:
        for torch_s in (False, True):
            model, opt = shard(
                method,
                _model().to(rank_device()),
                torch.optim.SGD,
                find_unused_parameters=True,
                bucket_cap_mb=0.001,
                lr=0.1,
            )
            _share_loss(model, *(t.to(rank_device()) for t in batches[0])).backward()
            if torch_s:
                try:
                    norm = _torch_norm(model, torch.nn.utils.clip_grad_norm_)
                    out[method, "refused"] = None
                except RuntimeError as err:  # a stage's: torch's function, unguarded
                    out[method, "refused"] = str(err)
                    norm = _torch_norm(model, torch.nn.utils.clip_grad_norm_.__wrapped__)
            else:
                norm = clip_grad_norm(model, opt, 1e12)
            opt.step()
            out[method, torch_s] = float(norm)
    return out


def _torch_norm(model, function) -> torch.Tensor:
    """The norm that ``function`` (torch's ``clip_grad_norm_``) reports; it clips nothing."""
    norm = function(model.parameters(), math.inf)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm
