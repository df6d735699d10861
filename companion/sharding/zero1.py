"""ZeRO stage 1: the optimizer state sharded; parameters and gradients stay whole.

Used in: chapter 9.

With data parallelism every rank holds the same Adam moments for every parameter:
``8 * psi`` bytes (fp32 ``exp_avg`` and ``exp_avg_sq``) copied ``N`` times. ZeRO-1
keeps them once, spread over the ranks. The trainable parameters become views into
one flat buffer (:class:`~.flat.FlatShards`); rank ``r`` builds its optimizer (SGD
with momentum, Adam, ...) over *its shard only*, so its state is ``1/N`` of the
whole. One step:

1. after ``loss.backward()`` every rank holds its full local gradient, as in DDP;
2. ``reduce_scatter_single`` averages the gradients *and* hands each rank only its
   shard of the average: the half of a ring all-reduce that rank ``r`` needs;
3. each rank steps its own shard (its state, its slice of the parameters);
4. ``all_gather_single`` sends every updated shard to every rank, the other
   half of the all-reduce: the parameters are whole again.

So ZeRO-1 sends the same bytes as DDP's all-reduce, plus one all-reduce of a
flag per parameter: one that got no gradient on any rank (forward did not use
it) is left alone, weight decay and momentum included, as torch's optimizer
leaves one whose ``.grad`` is ``None``; so the inner optimizer holds one leaf
view per parameter (``ShardedOptimizer._step_pieces``). It is a drop-in
optimizer: ``backward(); step(); zero_grad()``, and ``zero_grad()`` drops every
gradient of the step. ``clip_grad_norm_`` between ``backward()`` and ``step()``
clips by the whole gradient's norm (:mod:`companion.sharding.clip`). Every rank
counts equally in the average (``1/N``), as in torch's DDP; with uneven local
batches, weigh each rank's loss by its share of the samples.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_module, check_positive
from ..core.compat import all_gather_single, reduce_scatter_single
from ..internals.naive import broadcast_state, trainable_parameters
from ..runtime.agree import check_ranks_agree
from .clip import _guard_torch_clipping, clip_shards
from .flat import FlatShards, check_sharding_group
from .optim_state import (
    SHARD_OF,
    _forget_consolidated,
    load_whole_state,
    param_groups_of,
    whole_state,
)

__all__ = ["ShardedOptimizer", "Zero1"]

_SHARDED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its stage


class ShardedOptimizer(torch.optim.Optimizer):
    """What the three stages share: an optimizer over this rank's shard. It is a
    ``torch.optim.Optimizer`` whose ``param_groups`` and ``state`` are those of the real
    optimizer over the shard, so learning-rate schedulers, ``set_lr``, ``step(closure)`` and
    ``zero_grad(set_to_none)`` work as on any optimizer. ``state_dict()`` is the *whole*
    state, as torch's ``ZeroRedundancyOptimizer`` gives it: gathered to one rank by
    ``consolidate_state_dict(to)`` (every rank calls it), refused before, so that rank 0's
    ``torch.save(optimizer.state_dict())`` never keeps ``1/N`` of the moments in silence;
    ``load_state_dict()`` takes it at any world size. ``shard_state_dict()`` /
    ``load_shard_state_dict()`` are this rank's shard alone. ``params``: parameter groups
    as torch's optimizers take them (each trainable parameter once), or ``None`` for one."""

    def __init__(
        self,
        net: nn.Module,
        optimizer_class: type,
        name: str,
        layout: dict | None = None,
        params: Any = None,
        **defaults: Any,
    ):
        check_module(net, "net")
        if net in _SHARDED:
            raise ValueError(
                f"{name}: this model is already sharded by {_SHARDED[net]} (a cell run twice?): "
                f"build a fresh model and shard that"
            )
        if not (
            isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)
        ):
            raise TypeError(
                f"{name}: optimizer_class must be a torch.optim.Optimizer class such as "
                f"torch.optim.Adam, got {optimizer_class!r}"
            )
        self.rank, self.world_size = check_sharding_group(name)
        self.net, self.optimizer_class, self.defaults = net, optimizer_class, defaults
        self.named = trainable_parameters(net)
        if not self.named:
            raise ValueError(f"{name}: the model has no trainable parameters: nothing to shard")
        self._index = {id(p): j for j, (_, p) in enumerate(self.named)}
        self._groups = param_groups_of(self, params, name)  # [(indices, options)]
        self._order = [j for js, _ in self._groups for j in js]  # a plain optimizer's order
        self._got: set[int] = set()  # parameters that got a gradient since zero_grad()
        self._ready: list[torch.Tensor] | None = None  # this step's reduced shards, once reduced
        groups = [([self.named[j][0] for j in js], repr(opts)) for js, opts in self._groups]
        settings = {"optimizer": optimizer_class.__name__, **(layout or {}), **defaults}
        check_ranks_agree(net, {**settings, "groups": groups}, name)  # alike on every rank
        _SHARDED[net] = name

    def _make_inner(self, layouts: list[FlatShards], shards: list[torch.Tensor]) -> None:
        """The real optimizer, over this rank's part of each parameter: leaf views of
        its shards, one per parameter, so that one without a gradient can be skipped."""
        self.layouts = list(zip(layouts, shards))  # what a sharded checkpoint holds
        self.pieces = [
            (self._index[id(layout.params[i])], k, where, nn.Parameter(shard[where]))
            for k, (layout, shard) in enumerate(zip(layouts, shards))
            for i, where in layout.pieces()
        ]
        group_of = {j: g for g, (js, _) in enumerate(self._groups) for j in js}
        groups = [{**options, "params": []} for _, options in self._groups]
        for j, *_, piece in self.pieces:  # each piece in its parameter's group
            groups[group_of[j]]["params"].append(piece)
        if not self.pieces:  # this rank's shards are all padding (a tiny model)
            groups[0]["params"].append(nn.Parameter(shards[0][:0]))
        self.shard_params = [p for g in groups for p in g["params"]]  # the inner's order
        self.inner = self.optimizer_class(groups, **self.defaults)
        self._building = True  # Optimizer.__init__ adds the one group; later calls refuse
        torch.optim.Optimizer.__init__(self, self.shard_params, dict(self.inner.defaults))
        self._building = False
        self.param_groups, self.state = self.inner.param_groups, self.inner.state  # one copy
        self._consolidated: tuple[int, dict | None] | None = None  # consolidate_state_dict's
        self.inner.register_step_post_hook(partial(_forget_consolidated, weakref.ref(self)))
        _guard_torch_clipping(self)  # built: torch's clip_grad_norm_ refuses its parameters

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_building", False):
            return super().add_param_group(param_group)
        raise NotImplementedError(
            f"{type(self).__name__} shards the trainable parameters of the model it was built "
            f"with; give their groups when building it, as torch's optimizers take them: "
            f"{type(self).__name__}(net, torch.optim.AdamW, params=[{{'params': decay, "
            f"'weight_decay': 0.1}}, {{'params': no_decay, 'weight_decay': 0.0}}], lr=...)"
        )

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather the ranks' shards of the optimizer state into one whole ``state_dict``, kept
        on rank ``to`` for ``state_dict()`` until the next step. Every rank calls it, as with
        torch's ``ZeroRedundancyOptimizer``."""
        if type(to) is not int or not 0 <= to < self.world_size:
            raise ValueError(f"to must be a rank, 0 to {self.world_size - 1}, got {to!r}")
        whole = whole_state(self)
        self._consolidated = (to, whole if self.rank == to else None)

    def state_dict(self) -> dict:
        """The whole optimizer state, as a plain optimizer over the model's trainable
        parameters holds it, after ``consolidate_state_dict(to)``, on rank ``to``; it loads
        at any world size. No rank holds it otherwise, and saying so beats a silent shard."""
        to, whole = self._consolidated or (None, None)
        if whole is not None:
            return whole
        where = (
            "no rank has gathered it" if to is None else f"rank {to} holds it, this is {self.rank}"
        )
        raise RuntimeError(
            f"{type(self).__name__}.state_dict(): each rank holds only its shard of the "
            f"optimizer state ({where}). Call optimizer.consolidate_state_dict(to=0) on every "
            f"rank after the step, then state_dict() on rank 0 (as torch's "
            f"ZeroRedundancyOptimizer asks); or save_sharded(model, optimizer, path) on every "
            f"rank; or shard_state_dict() for this rank's shard alone"
        )

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a whole ``state_dict()`` (saved at any world size, or a plain optimizer's over
        the same trainable parameters) on every rank: each keeps the pieces of its shard."""
        load_whole_state(self, state_dict)
        self._consolidated = None  # gathered before this load: stale

    def shard_state_dict(self) -> dict:
        """This rank's shard of the optimizer state, marked with its rank and world size."""
        shard = {"rank": self.rank, "world_size": self.world_size}
        return {SHARD_OF: shard, **self.inner.state_dict()}

    def load_shard_state_dict(self, state_dict: dict) -> None:
        """Load what ``shard_state_dict()`` gave on this rank, at this world size and layout."""
        mine = {"rank": self.rank, "world_size": self.world_size}
        if not isinstance(state_dict, dict) or state_dict.get(SHARD_OF) != mine:
            got = state_dict.get(SHARD_OF) if isinstance(state_dict, dict) else state_dict
            raise ValueError(
                f"{type(self).__name__}.load_shard_state_dict: this is rank {self.rank} of "
                f"{self.world_size}, the state is {'not a shard' if got is None else got}: "
                f"load each rank's own shard, or a whole state_dict() with load_state_dict()"
            )
        self.inner.load_state_dict({k: v for k, v in state_dict.items() if k != SHARD_OF})
        self.param_groups, self.state = self.inner.param_groups, self.inner.state
        self._consolidated = None

    @staticmethod
    def _closure(closure) -> Any:
        """``closure()`` with gradients on (the loss it returns), as torch's ``step`` does."""
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()

    def _step_pieces(self, grads: list[torch.Tensor], got: set[int], **kwargs: Any) -> None:
        """Step the pieces of every parameter that got a gradient on some rank.

        ``grads[k]``: this rank's shard of the averaged gradient of layout ``k``.
        A parameter that got none on any rank keeps ``.grad = None`` and is left
        alone, weight decay and momentum included, as torch's optimizer leaves it.
        """
        flags = torch.zeros(len(self.named), device=grads[0].device)
        flags[list(got)] = 1.0
        dist.all_reduce(flags)  # one number per parameter: used on some rank?
        for j, k, where, piece in self.pieces:
            piece.grad = grads[k][where] if flags[j] > 0 else None
        self.inner.step(**kwargs)  # keywords go to the inner step, as in torch's ZeRO
        self._ready = None  # the next step reduces its own gradients

    @torch.no_grad()
    def reduced_grads(self) -> list[torch.Tensor]:
        """This step's averaged gradient as this rank's shard of each layout: reduced
        once (the stage's ``_reduce``), kept until ``step()`` or ``zero_grad()``."""
        if self._ready is None:
            self._ready = self._reduce()
        return self._ready

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
    ) -> torch.Tensor:
        """Clip this step's gradients to a global norm of at most ``max_norm``, between
        ``backward()`` and ``step()``; the norm before clipping, the same on every rank.
        Torch's ``clip_grad_norm_`` over the model's parameters refuses a stage's: this is
        the call that replaces it (:mod:`companion.sharding.clip`)."""
        shards = self.reduced_grads()
        return clip_shards(shards, max_norm, None, norm_type, error_if_nonfinite)

    @torch.no_grad()
    def clip_grad_value_(self, clip_value: float) -> None:
        """Clamp this step's averaged gradient to ``[-clip_value, clip_value]``, between
        ``backward()`` and ``step()``, as torch's ``clip_grad_value_`` does under DDP."""
        check_positive(clip_value, "clip_value")
        for shard in self.reduced_grads():
            shard.clamp_(-clip_value, clip_value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As torch's: this step's gradients are gone, those reduced in backward too."""
        self._discard_reduced()
        self._ready = None
        if set_to_none:  # else every parameter with a gradient keeps a zero one
            self._got = set()
        for p in [*self.net.parameters(), *self.shard_params]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def _syncing(self) -> bool:
        """Whether this backward reduces its gradients: not while the model's
        ``require_backward_grad_sync`` is false (torch's DDP reads it at forward; the
        stages, whose model is not a wrapper, when its gradients arrive)."""
        return bool(getattr(self.net, "require_backward_grad_sync", True))

    def _discard_reduced(self) -> None:
        """Drop the gradient shards reduced during backward (the later stages have some)."""

    def _whole_again(self) -> None:
        """After the shards changed: the stage's whole parameters, where it keeps them."""


class Zero1(ShardedOptimizer):
    """ZeRO-1 by hand: ``Zero1(net, torch.optim.Adam, lr=1e-3)``, then use it as the optimizer."""

    def __init__(self, net: nn.Module, optimizer_class: type, **defaults: Any):
        super().__init__(net, optimizer_class, "Zero1", **defaults)
        broadcast_state(net)  # every replica starts from rank 0's parameters and buffers
        params = [p for _, p in self.named]
        self.layout = FlatShards(params, self.world_size, self.rank)
        self.flat = self.layout.flatten([p.detach() for p in params])
        for p, view in zip(params, self.layout.views(self.flat)):
            p.data = view  # the parameters now live in the flat buffer
        self._make_inner([self.layout], [self.layout.shard(self.flat)])

    def _reduce(self) -> list[torch.Tensor]:
        grad = self.layout.flat_grad().div_(self.world_size)  # zeros for unused ones
        mine = torch.empty_like(self.layout.shard(self.flat))
        reduce_scatter_single(mine, grad)  # average, keep my shard
        return [mine]

    @torch.no_grad()
    def step(self, closure=None, **kwargs: Any) -> Any:
        loss = self._closure(closure)  # torch's contract: evaluate, then step
        got = {j for j, (_, p) in enumerate(self.named) if p.grad is not None}
        self._step_pieces(self.reduced_grads(), got, **kwargs)  # my shard: parameters, state
        for piece in self.shard_params:
            piece.grad = None  # the whole gradients stay until zero_grad()
        self._whole_again()
        return loss

    def _whole_again(self) -> None:
        all_gather_single(self.flat, self.layout.shard(self.flat).clone())
