"""Gradient accumulation under FSDP2: what its two setters save, what they hold, and the pitfall.

Used in: chapter 9.

DDP's ``no_sync()`` ([chapter 6]) skips the all-reduce of every micro-step but
the last. FSDP2 has no ``no_sync``; before each micro-step's backward, two
setters on the sharded model choose:

* ``set_requires_gradient_sync(False)``: no reduce-scatter. Each rank keeps the
  *whole* (unsharded) gradient of each unit and adds the next micro-step's to
  it; the micro-step run with ``True`` reduce-scatters the sum once. The
  bytes of the reduce-scatters go, and the whole gradient is held between
  micro-steps: the gradient memory of ZeRO-1 (and DDP).
* ``set_reshard_after_backward(False)``: the unit's gathered parameters stay
  after backward, so the next micro-step's forward gathers nothing. Whole
  parameters are held as well: the memory of DDP.

:data:`ACCUMULATION` names the three combinations; :func:`accumulation_worker`
measures each. The pitfall is leaving sync off for the last micro-step too:
nothing is reduce-scattered, no sharded parameter receives a gradient, and
``optimizer.step()`` changes nothing, without an error.
:func:`check_gradients_reduced` catches it between backward and step.
"""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_int, check_module
from ..ddp.detectors import MistakeDetected
from ..runtime.group import rank_device
from .ledger import count_bytes
from .library import fsdp2
from .memory import _storage_bytes
from .training import full_parameters
from .verify import OPTIMIZERS, _model, _share_loss

__all__ = [
    "ACCUMULATION",
    "NEVER_SYNCED",
    "GradientsNotReduced",
    "check_gradients_reduced",
    "live_tensor_bytes",
    "accumulation_worker",
]

# name: (sync before the last micro-step, reshard after backward before the last)
ACCUMULATION = {
    "sync every micro-step": (True, True),
    "sync on the last only": (False, True),
    "sync on the last, keep gathered": (False, False),
}
NEVER_SYNCED = "sync never re-enabled"  # the pitfall


class GradientsNotReduced(MistakeDetected):
    """A backward ran, yet no parameter of the sharded model holds a gradient."""


def check_gradients_reduced(model: nn.Module) -> None:
    """Raise :class:`GradientsNotReduced` if no trainable parameter of ``model`` has a
    gradient. Call it after the last micro-step's backward, before ``optimizer.step()``."""
    check_module(model, "model")
    params = [p for p in model.parameters() if p.requires_grad]
    if params and all(p.grad is None for p in params):
        raise GradientsNotReduced(
            "no parameter has a gradient after backward, so optimizer.step() would change "
            "nothing: FSDP2 reduce-scatters the accumulated gradients only in a backward run "
            "after set_requires_gradient_sync(True). Call it before the last micro-step"
        )


def live_tensor_bytes() -> int:
    """Bytes of the distinct storages of every tensor that Python reaches (and of the
    gradients of the leaves among them): what this process holds in tensors right now,
    garbage collected first. (``type``, not ``isinstance``: that would touch deprecated objects.)"""
    gc.collect()
    tensors = [t for t in gc.get_objects() if issubclass(type(t), torch.Tensor)]
    tensors += [t.grad for t in tensors if t.is_leaf and t.grad is not None]
    return _storage_bytes(tensors)


def accumulation_worker(rank: int, world_size: int, batches, micro_steps: int = 4) -> dict:
    """Worker: FSDP2 trains the chapter's model (float64, SGD with momentum) on the global
    ``batches``, each cut into ``micro_steps`` micro-batches, with each setting of
    :data:`ACCUMULATION` and with the pitfall. Per setting: the whole parameters after
    the steps; for the first step, the bytes this rank sent in each micro-step and the
    tensor bytes it held after each micro-step's backward beyond what it held before the
    step; and what :func:`check_gradients_reduced` said before the first step."""
    check_int(micro_steps, "micro_steps")
    device, out = rank_device(), {}
    cls, hp = OPTIMIZERS["SGD momentum"]
    for name, (sync, reshard) in {**ACCUMULATION, NEVER_SYNCED: (False, True)}.items():
        net, opt = fsdp2(_model().to(device), cls, **hp)
        for step, (X, y) in enumerate(batches):
            micro = list(zip(X.to(device).tensor_split(micro_steps), y.tensor_split(micro_steps)))
            before, sent, held = live_tensor_bytes(), [], []
            for i, (X_m, y_m) in enumerate(micro):
                last = i == micro_steps - 1
                net.set_requires_gradient_sync(sync or (last and name != NEVER_SYNCED))
                net.set_reshard_after_backward(reshard or last)
                with count_bytes() as ledger:
                    _share_loss(net, X_m, y_m.to(device), total=len(y)).backward()
                sent.append(ledger.sent())
                dist.barrier()  # every rank's collectives done: no buffer of one in flight
                held.append(live_tensor_bytes() - before)
            if step == 0:
                out[name, "sent"], out[name, "held"] = sent, held
                try:
                    check_gradients_reduced(net)
                    out[name, "caught"] = None
                except GradientsNotReduced as err:
                    out[name, "caught"] = f"{type(err).__name__}: {err}"
            opt.step()
            opt.zero_grad()
        out[name] = full_parameters(net, opt)
    net = _model()  # the whole gradient of one process, the parameters that get one
    F.cross_entropy(net(batches[0][0]), batches[0][1]).backward()
    out["grad bytes"] = sum(p.grad.nbytes for p in net.parameters() if p.grad is not None)
    return out
