"""Local SGD and DiLoCo by hand: replicas that step alone and meet every H steps.

Used in: chapter 10.

Both wrap an ordinary ("inner") optimizer of a model that is **not**
wrapped in DDP, so each rank steps on its own gradients and the replicas
drift apart; ``step()`` is the inner step and, every ``period`` steps, a
meeting:

* :class:`LocalSGD` (Stich 2019; torch's ``PeriodicModelAverager`` and
  ``PostLocalSGDOptimizer``) averages the parameters. With plain SGD (or
  momentum, or weight decay: all linear) and ``period=1`` this is DDP:
  ``mean(w - lr g_i) = w - lr mean(g_i)``.
* :class:`DiLoCo` (Douillard et al. 2023, arXiv 2311.08105) keeps the
  parameters of the last meeting, ``w0``; at a meeting the averaged
  *pseudo-gradient* ``mean(w0 - w_i)`` goes to an outer optimizer (SGD with
  Nesterov momentum) that moves ``w0``, and every replica restarts from it.
  With inner SGD, ``period=1`` and an outer SGD of lr 1 without momentum
  this is DDP again: ``w0 - mean(w0 - (w0 - lr g_i))``.

Only parameters meet: buffers (BatchNorm's running statistics) stay each
rank's own, where DDP broadcasts rank 0's at every forward. A meeting sends
the parameters (or the pseudo-gradient) once: with ``H``
steps between meetings, ``1/H`` of what DDP sends. ``allreduce`` is the
sum used (``dist.all_reduce``, or chapter 3's hand-written ones). Both are
``torch.optim.Optimizer``s sharing the inner one's ``param_groups`` and
``state``, so schedulers and ``zero_grad`` work as usual.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ..core.checks import check_int, check_lr
from ..runtime.group import check_group

__all__ = ["average_parameters", "LocalSGD", "DiLoCo"]


def _sum(tensor: torch.Tensor, allreduce: Callable | None) -> None:
    dist.all_reduce(tensor) if allreduce is None else allreduce(tensor)


def _check_tensors(params) -> list[torch.Tensor]:
    check_group("average_parameters")
    params = list(params)
    if not params or not all(torch.is_tensor(p) for p in params):
        raise ValueError(
            "average_parameters needs a list of tensors, e.g. "
            "[p for p in net.parameters() if p.requires_grad]"
        )
    return params


@torch.no_grad()
def average_parameters(params: list[torch.Tensor], allreduce: Callable | None = None) -> None:
    """Every rank's ``params`` replaced by their mean over the ranks (packed in one message,
    divided by N before the sum, as torch's ``average_parameters``)."""
    params = _check_tensors(params)
    flat = torch.cat([p.reshape(-1) for p in params]) / dist.get_world_size()
    _sum(flat, allreduce)
    for p, piece in zip(params, flat.split([p.numel() for p in params])):
        p.copy_(piece.view_as(p))


class _Periodic(torch.optim.Optimizer):
    """The inner optimizer's step, and every ``period`` steps a :meth:`meet`."""

    def __init__(self, inner: torch.optim.Optimizer, period: int, allreduce: Callable | None):
        if not isinstance(inner, torch.optim.Optimizer):
            raise TypeError(
                f"{type(self).__name__} wraps a torch optimizer, e.g. "
                f"torch.optim.SGD(net.parameters(), lr=0.1); got {inner!r}"
            )
        self.period = check_int(period, "period", 1, "the steps between meetings: 1, 4, 16, ...")
        if allreduce is not None and not callable(allreduce):
            raise TypeError(
                f"allreduce must be a function such as allreduce_ring, got {allreduce!r}"
            )
        check_group(type(self).__name__)
        self.inner, self.allreduce, self.steps = inner, allreduce, 0
        torch.optim.Optimizer.__init__(self, self.params(), dict(inner.defaults))
        self.param_groups, self.state = inner.param_groups, inner.state  # one copy

    def params(self) -> list[torch.Tensor]:
        """The parameters that train (frozen ones never move, so never meet)."""
        return [p for g in self.inner.param_groups for p in g["params"] if p.requires_grad]

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.inner.step(closure)
        self.steps += 1
        if self.steps % self.period == 0:
            self.meet()
        return loss

    def meet(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "steps": self.steps}

    def load_state_dict(self, state_dict: dict) -> None:
        self.inner.load_state_dict(state_dict["inner"])
        self.steps = state_dict["steps"]


class LocalSGD(_Periodic):
    """Local steps; every ``period`` steps the replicas' parameters are averaged."""

    def __init__(
        self, inner: torch.optim.Optimizer, period: int, allreduce: Callable | None = None
    ):
        super().__init__(inner, period, allreduce)

    def meet(self) -> None:
        average_parameters(self.params(), self.allreduce)


def _check_outer(outer_lr: float, outer_momentum: float) -> None:
    check_lr(outer_lr)
    if not 0 <= outer_momentum < 1:
        raise ValueError(f"outer_momentum must be in [0, 1), got {outer_momentum}: e.g. 0.9, or 0")


class DiLoCo(_Periodic):
    """``period`` inner steps, then an outer step on the averaged pseudo-gradient."""

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        period: int,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        allreduce: Callable | None = None,
    ):
        _check_outer(outer_lr, outer_momentum)
        super().__init__(inner, period, allreduce)
        self.start = [p.detach().clone().requires_grad_() for p in self.params()]  # w0
        self.outer = torch.optim.SGD(
            self.start, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0
        )

    @torch.no_grad()
    def meet(self) -> None:
        params = self.params()
        delta = torch.cat([(w0 - p).reshape(-1) for w0, p in zip(self.start, params)])
        _sum(delta, self.allreduce)
        delta /= dist.get_world_size()  # the mean pseudo-gradient
        for w0, piece in zip(self.start, delta.split([p.numel() for p in params])):
            w0.grad = piece.view_as(w0)
        self.outer.step()
        for w0, p in zip(self.start, params):
            p.copy_(w0)  # every replica restarts from the new w0

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "start": [w.detach().clone() for w in self.start],
            "outer": self.outer.state_dict(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for w0, saved in zip(self.start, state_dict["start"]):
                w0.copy_(saved)
        self.outer.load_state_dict(state_dict["outer"])
