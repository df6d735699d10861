"""Step 1 of DDP from scratch: all-reduce every gradient after ``backward()``.

Used in: chapter 6.

:class:`NaiveDDP` is the wrapper that the later steps build on. Like
``torch.nn.parallel.DistributedDataParallel`` it broadcasts rank 0's
parameters and buffers once, so every replica starts equal; its forward
pass runs the module and notes how many samples this rank saw. At the end
of ``loss.backward()`` :meth:`NaiveDDP.finish` runs by itself and averages
the gradients with chapter 3's ``average_gradients``: one all-reduce per
parameter tensor, each one only after the whole backward pass. Nothing
overlaps, and every tensor pays the per-message latency.

A drop-in for torch's DDP: every parameter's gradient hook notes that its
gradient is ready, and the one that completes the set queues ``finish`` on
the autograd engine (``Variable._execution_engine.queue_callback``, a
private torch API that torch's FSDP uses the same way), which calls it once
that backward pass has ended. So training code written for torch's DDP
drives these wrappers unchanged, and what torch's DDP allows works here
too: an output computed and ignored, two forward passes and one backward,
several backward passes that together reach every parameter, and
checkpointing: a recomputation inside backward begins no step, unless it
recomputes a first pass that ran without autograd (reentrant checkpointing
around the wrapper runs its first pass under ``no_grad``). A
parameter that got no gradient is named at the next forward pass, as
torch's DDP does, and one that gets two in one step is refused, as there.
The hooks live as long as the wrapper (:mod:`.lifetime`): a backward
pass through ``net.module`` communicates nothing. The fallback:
``finish_in_backward=False`` (or a torch without that API) leaves the call
to the loop, ``loss.backward(); net.finish()``. Calling ``finish()`` again
after it ran does nothing.

Two things are shared by every step:

* ``no_sync()``: inside it, forward passes are marked "do not
  communicate", so the gradients of several micro-batches add up locally
  and only the step after the ``with`` block averages them. It sets
  ``require_backward_grad_sync = False``, the attribute torch's DDP reads at
  each forward pass; scripts such as nanoGPT set it themselves
  (``model.require_backward_grad_sync = last_micro_step``), and it works here
  as there;
* ``weigh_by_samples``: with ranks that see different numbers of samples,
  each rank's mean gradient is weighed by its sample count (one extra,
  one-number all-reduce per step) and the result is the gradient of the mean
  loss over the global batch. Without it every rank counts equally, as in
  torch's DDP. Under ``no_sync`` the accumulated gradient must be the mean
  over this rank's samples since the last synchronised step (divide each
  micro-batch's loss by the number of micro-batches when they are equal).
  Every forward pass with autograd on counts its samples, an output that is
  computed and ignored included: keep such passes under ``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable

from ..collectives.partition import average_gradients
from ..core.checks import check_instance, check_module
from ..runtime.agree import check_ranks_agree
from ..runtime.checkpoint import register_wrapper
from .lifetime import hook_parameters
from .steps import StepBookkeeping, check_trainable, unused_error

__all__ = [
    "broadcast_state",
    "trainable_parameters",
    "NaiveDDP",
    "sample_weight",
    "can_finish_in_backward",
    "unused_error",
]


def can_finish_in_backward() -> bool:
    """Whether this torch lets a hook queue a call for the end of backward."""
    return hasattr(getattr(Variable, "_execution_engine", None), "queue_callback")


def broadcast_state(net: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank, in place."""
    _check(net, "broadcast_state")
    for name, tensor in [*net.named_parameters(), *net.named_buffers()]:
        if tensor.layout != torch.strided:  # c10d would fail deep inside, naming nothing
            raise ValueError(
                f"{name} is a {tensor.layout} tensor: the wrappers and stages broadcast, "
                f"flatten and average dense tensors only; make it dense (.to_dense()). A "
                f"sparse gradient of a dense parameter (nn.Embedding(sparse=True)) is fine"
            )
    with torch.no_grad():
        for tensor in [*net.parameters(), *net.buffers()]:
            dist.broadcast(tensor, src=0)


def trainable_parameters(net: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of each parameter that needs a gradient, each once.

    ``named_parameters`` already yields a tied (shared) parameter once, under
    its first name; frozen ones (``requires_grad=False``) are left out: they
    never get a gradient and are never communicated.
    """
    check_module(net, "net")
    return [(name, p) for name, p in net.named_parameters() if p.requires_grad]


class NaiveDDP(StepBookkeeping, nn.Module):
    """Data parallelism by hand: ``finish()`` all-reduces each gradient after backward.

    Use it like torch's DDP: ``loss.backward()`` ends with ``finish()``.
    ``allreduces`` counts the gradient all-reduces made so far (the
    one-number count of ``weigh_by_samples`` is not counted).
    """

    def __init__(
        self, module: nn.Module, weigh_by_samples: bool = False, finish_in_backward: bool = True
    ):
        super().__init__()
        _check_wrap(module, type(self).__name__, weigh_by_samples, finish_in_backward)
        self.module, self.weigh_by_samples = module, weigh_by_samples
        self.allreduces = 0
        self._params = check_trainable(trainable_parameters(module))
        self._drop_in = finish_in_backward and can_finish_in_backward()
        self.require_backward_grad_sync, self._released = True, False  # torch DDP's name
        self._new_step()
        broadcast_state(module)
        self._handles = hook_parameters(self, self._params, self._on_grad)

    def forward(self, *args, **kwargs):
        self._forward_pass(args[0] if args else None)  # begins a step (checkpoints aside)
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forward passes inside the block leave their gradients local (accumulation)."""
        before, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before  # nested: the outer block still holds

    def finish(self) -> None:
        """After ``backward()``: average every gradient over the ranks (unless ``no_sync``)."""
        if not self._pending:
            return
        if not self._complete():
            self._give_up()
        self._average()
        self._new_step()

    def _average(self) -> None:
        n_local = self._samples if self.weigh_by_samples else None
        average_gradients(self.module, "dist.all_reduce", n_local=n_local)
        grads = [p for p in self.module.parameters() if p.grad is not None]
        self.allreduces += len(grads)


register_wrapper(NaiveDDP)  # unwrap() and checkpoints see the model inside, as with torch's DDP


def sample_weight(net: NaiveDDP) -> float:
    """What a rank's gradients are multiplied by before the sum over the ranks.

    ``1 / world size``, as in torch's DDP; with ``weigh_by_samples``, this
    rank's share of the samples since the last synchronised step (one
    one-number all-reduce), so that the sum is the gradient of the mean loss
    over the global batch.
    """
    if not net.weigh_by_samples:
        return 1.0 / dist.get_world_size()
    device = next(net.module.parameters()).device  # nccl: GPU tensors only
    total = torch.tensor([float(net._samples)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return net._samples / float(total)


def _check_wrap(module: nn.Module, name: str, weigh_by_samples, finish_in_backward) -> None:
    _check(module, name, weigh_by_samples=weigh_by_samples, finish_in_backward=finish_in_backward)
    check_ranks_agree(module, {"weigh_by_samples": weigh_by_samples}, name)


def _check(module: nn.Module, name: str, **flags: bool) -> None:
    check_module(module, "module")
    for flag, value in flags.items():  # bool("no") is True: a flag must be a bool
        check_instance(value, flag, bool, "pass True or False (a string such as 'no' is not False)")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{name} needs a process group: create it inside a worker started by "
            f"companion.runtime.launch (or torchrun), then wrap the model"
        )
