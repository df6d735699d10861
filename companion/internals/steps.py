"""The bookkeeping of a step, shared by chapter 6's three wrappers.

Used in: chapter 6.

:class:`StepBookkeeping` is what makes :class:`~companion.internals.naive.NaiveDDP`
and its two successors drop-ins for torch's DDP, kept apart from them so
that their listings show the algorithm. A forward pass begins a step
(``_begin``); each parameter's gradient hook
(``_on_grad``) notes the gradient as ready and hands
it to the wrapper's ``_reduce``; the hook that completes the set queues the
wrapper's ``finish()`` for the end of that backward pass. A step that never
completes is named at the next forward pass, as torch's DDP names it.
"""

from __future__ import annotations

from typing import NoReturn

import torch
from torch.autograd import Variable

from ..ddp.unused import UnusedParameters
from .lifetime import in_backward

__all__ = ["StepBookkeeping", "check_trainable", "unused_error"]


class StepBookkeeping:
    """Which gradients of this step have arrived, and when the step is complete."""

    def _forward_pass(self, X) -> None:
        """A forward pass begins a step; one inside backward is a checkpoint's recomputation
        within a step already begun, unless it recomputes a first pass that ran without
        autograd (reentrant checkpointing around the wrapper runs that under no_grad)."""
        if not torch.is_grad_enabled():  # a metric, or such a first pass
            self._no_grad_passes += not in_backward() and not self._begun
        elif not in_backward():
            self._no_grad_passes = 0
            self._begin(X)
        elif self._no_grad_passes:  # in backward: that first pass, recomputed with autograd
            self._no_grad_passes -= 1
            self._begin(X)

    def _begin(self, X) -> None:
        """A forward pass: communicate in the backward that follows, or accumulate."""
        if self._pending and self._ready and not self._complete():
            self._give_up()  # the last backward missed some: name them
        self._samples += _check_step(self, X)
        self._pending = self.require_backward_grad_sync  # decided now, as torch's DDP does
        self._accumulating |= not self._pending
        self._begun = True  # until its backward: a pass without autograd then is a metric

    def _on_grad(self, name: str, p: torch.Tensor) -> None:
        """A parameter's gradient is complete for this backward pass."""
        self._begun = False  # a backward is under way
        if not self._pending:
            if self._accumulating:
                self._used.add(name)  # no_sync(): the gradient stays local
            return
        if name in self._ready or name in self._filled:
            raise RuntimeError(_twice(name, type(self).__name__, name in self._filled))
        if not self._ready:
            self._prepare()  # the first gradient of a synchronised backward
        self._ready.add(name)
        if p.grad is None:  # an undefined gradient (autograd's UndefinedGrad): none from here
            self._undefined.add(name)
        self._reduce(name, p)
        if self._drop_in and self._complete() and not self._queued:
            self._queued = True  # finish once this backward has ended
            Variable._execution_engine.queue_callback(self.finish)

    def _prepare(self) -> None:
        """The first gradient of a synchronised backward; the later steps set up their state."""

    def _reduce(self, name: str, p: torch.Tensor) -> None:
        """A gradient is ready; the later steps start communicating it at once."""

    def _complete(self) -> bool:
        return len(self._ready) + len(self._filled) == len(self._params)

    def _missing(self) -> list[str]:
        done = self._ready | self._filled
        return [name for name, _ in self._params if name not in done]

    def _wait_started(self) -> None:
        """Wait for communication already started (the later steps have some)."""

    def _new_step(self) -> None:
        self._samples, self._ready, self._used, self._filled = 0, set(), set(), set()
        self._undefined: set[str] = set()  # ready, but backward brought no gradient
        self._reachable: set[int] = set()  # for find_unused_parameters: ids of parameters
        self._pending = self._queued = self._accumulating = self._begun = False
        self._no_grad_passes = 0  # passes without autograd while no step had begun

    def _give_up(self) -> NoReturn:
        """Some parameters never got a gradient: end the step and name them."""
        missing = self._missing()
        self._wait_started()  # no collective is left half done
        self._new_step()
        raise unused_error(missing, type(self).__name__)

    def release(self) -> None:
        """Remove this wrapper's hooks (a newer wrapper over the same module calls it)."""
        for handle in self._handles:
            handle.remove()
        self._released = True


def _check_step(ddp, X) -> int:
    """The samples ``X`` adds to this step's count; refuses what would drift in silence.

    In the fallback (``finish_in_backward=False``) a synchronised forward pass
    begins a step and ``finish()`` ends it: a forward pass in between means
    ``finish()`` was skipped, and without it the gradients stay local.
    """
    name = type(ddp).__name__
    if ddp._released:
        raise RuntimeError(
            f"{name}: a newer wrapper over the same module replaced this one and its "
            f"hooks are gone: use the newer wrapper"
        )
    if ddp._pending and not ddp._drop_in:
        raise RuntimeError(
            f"{name}: a forward pass began a new step before finish() ended "
            f"the last one: call net.finish() after loss.backward() and before "
            f"optimizer.step(), or the replicas drift apart"
        )
    if isinstance(X, torch.Tensor) and X.dim() > 0:
        return len(X)
    if ddp.weigh_by_samples:
        raise TypeError(
            f"weigh_by_samples counts the samples of forward's first argument, a tensor "
            f"with one row per sample; got {type(X).__name__}: pass the input tensor "
            f"first, or weigh_by_samples=False"
        )
    return 0


def check_trainable(named: list) -> list:
    """``named``, or an error if it is empty (nothing to communicate)."""
    if not named:
        raise ValueError(
            "the module has no trainable parameters: nothing to all-reduce (torch's DDP "
            "refuses it too); train it without a wrapper"
        )
    return named


def _twice(name: str, wrapper: str, unreachable: bool = False) -> str:
    if unreachable:
        return (
            f"{wrapper}: {name} got a gradient, but forward's outputs do not lead to it: "
            f"return every tensor the loss uses"
        )
    return (
        f"{wrapper}: parameter {name} got a second gradient in one synchronised step "
        f"(two backward passes through it). Torch's DDP refuses this too: add the losses "
        f"and call backward once"
    )


def unused_error(names: list[str], wrapper: str) -> UnusedParameters:
    """The error for parameters that got no gradient, saying what to do."""
    return UnusedParameters(
        f"{wrapper}: parameter(s) {', '.join(names)} got no gradient in the last "
        f"synchronised step (forward did not use them), so their all-reduce never "
        f"started. Freeze them (p.requires_grad_(False)), remove them, or use "
        f"BucketedDDP(..., find_unused_parameters=True)"
    )
