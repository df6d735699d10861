"""ZeRO stage 3: parameters sharded too, gathered per unit just before they are used.

Used in: chapter 9.

Each rank keeps only its shard of every parameter. The model is cut into
*units* (by default the top-level children that own trainable parameters;
what is left, and any parameter that two units share, such as a tied
weight, forms the *root* unit). Each unit is one flat, padded buffer
(:class:`~.flat.FlatShards`) whose views are the unit's parameters. Its
life in one step:

* forward: just before the unit runs, ``all_gather_single`` fills the
  buffer from the shards; just after, the buffer's storage is freed
  (``resize_(0)``: the parameters keep their shape, lose their memory);
* backward: a hook on the unit's output fires just before backward reaches
  the unit and gathers the buffer again (autograd saved the parameters,
  not copies: they must be whole when used);
* when every gradient of the unit is ready, they are flattened, divided by
  ``N``, reduce-scattered (asynchronously) into this rank's shard and the
  buffer is freed again.

The root unit is gathered once per step and freed after backward, as FSDP2
does. ``optimizer.step()`` waits, launches any unit whose gradients were
incomplete (an unused parameter: zeros), and steps the pieces of the
parameters that got a gradient on some rank (ZeRO-1's flags). Bytes: two
all-gathers and a reduce-scatter, 1.5 times DDP's all-reduce. With
``prefetch=True`` the next unit's gather (in forward or backward order) starts
while the current one computes. Frozen parameters are not sharded.

Mixed precision as FSDP2's ``param_dtype=torch.bfloat16``: each rank keeps its
fp32 shard (the master copy the optimizer steps), casts it once per gather and
gathers bf16 into the unit's buffer, so autograd saves the buffer itself, which
the unit frees (autocast alone would save bf16 copies outside it until
backward). Gradients are averaged and reduce-scattered in fp32. Accumulation as
ZeRO-2's: while the model's ``require_backward_grad_sync`` is false, each
unit's gradients add up in its whole gradient buffer and nothing is
reduce-scattered (the gathers still run).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from ..core.checks import check_choice
from ..core.compat import all_gather_single, reduce_scatter_single
from ..internals.lifetime import in_backward
from ..internals.naive import broadcast_state
from .flat import FlatShards, default_units
from .freed import _placeholder, guard_reads, is_placeholder
from .zero1 import ShardedOptimizer

__all__ = ["Unit", "Zero3", "default_units"]

MIXED = (None, torch.bfloat16, torch.float16)  # param_dtype: the parameters' own, or these


class Unit:
    """One unit's flat buffer (gathered or freed, in the compute dtype), its shard (the
    fp32 master), its gradient buffer."""

    def __init__(self, name: str, params: list[nn.Parameter], world_size: int, rank: int, dtype):
        self.name, self.layout = name, FlatShards(params, world_size, rank)
        flat = self.layout.flatten([p.detach() for p in params])
        self.shard = self.layout.shard(flat).clone()
        self.full = flat.to(dtype or flat.dtype)
        for p, view in zip(params, self.layout.views(self.full)):
            p.data = view  # views for good; only the storage comes and goes
        self.nbytes = self.full.untyped_storage().nbytes()
        self.gathered, self.work, self.sent = True, None, None
        self.grad: torch.Tensor | None = None
        self.ready: set[int] = set()
        self.pending: list[tuple[Any, torch.Tensor]] = []

    def start_gather(self) -> Any:
        """Allocate the buffer and start filling it from every rank's shard."""
        if self.gathered or self.work is not None:
            return None
        self.full.untyped_storage().resize_(self.nbytes)
        self.sent = self.shard.to(self.full.dtype)  # param_dtype: cast once, here
        # .data: a fresh version counter, so autograd does not see the refill as a change
        self.work = all_gather_single(self.full.data, self.sent, async_op=True)
        return self.work

    def wait(self) -> None:
        """Wait for the gather in flight, if any; the parameters are whole again."""
        if self.work is not None:
            self.work.wait()
            self.work, self.sent, self.gathered = None, None, True
            for p, view in zip(self.layout.params, self.layout.views(self.full)):
                p.data = view

    def free(self) -> None:
        self.wait()  # never free a buffer a collective is still writing
        self.full.untyped_storage().resize_(0)
        self.gathered = False
        for p in self.layout.params:  # NaN stands in: no read of freed memory
            p.data = _placeholder(p)


class Zero3(ShardedOptimizer):
    """ZeRO-3 by hand: ``Zero3(net, torch.optim.Adam, lr=1e-3)``; ``net`` is used as is."""

    def __init__(
        self,
        net: nn.Module,
        optimizer_class: type,
        units: list[nn.Module] | None = None,
        prefetch: bool = False,
        param_dtype: torch.dtype | None = None,
        **defaults: Any,
    ):
        self.param_dtype = check_choice(param_dtype, "param_dtype", MIXED)
        layout = {"prefetch": prefetch, "param_dtype": str(param_dtype)}
        super().__init__(net, optimizer_class, "Zero3", layout, **defaults)
        broadcast_state(net)
        self.prefetch = bool(prefetch)
        self.units, modules = self._build_units(units)
        self.root = self.units[-1] if self.units[-1].name == "root" else None
        self.order: list[Unit] = []  # forward order, learnt in the first forward
        for unit, module in zip(self.units, modules):
            if module is not None:
                module.register_forward_pre_hook(partial(self._pre_forward, unit))
                module.register_forward_hook(partial(self._post_forward, unit))
            for i, p in enumerate(unit.layout.params):
                p.register_post_accumulate_grad_hook(partial(self._grad_ready, unit, i))
        net.register_forward_pre_hook(self._root_pre_forward)
        if self.param_dtype is not None:  # floating inputs in the weights' dtype, as FSDP2
            cast = partial(_cast_inputs, self.param_dtype)
            cast.casts_inputs = True  # so core.check_batch accepts an fp32 batch
            net.register_forward_pre_hook(cast)
        net.register_state_dict_pre_hook(self._refuse_state_dict)
        for unit in self.units:
            unit.free()
        owners = [m for m in net.modules() if any(map(is_placeholder, m.parameters(False)))]
        guard_reads(owners)
        self._make_inner([u.layout for u in self.units], [u.shard for u in self.units])

    def _build_units(self, units):
        modules = default_units(self.net) if units is None else list(units)
        owners: dict[nn.Parameter, list[int]] = {}
        for k, m in enumerate(modules):
            for p in m.parameters():
                owners.setdefault(p, []).append(k)
        names = {m: n for n, m in self.net.named_modules()}
        built, kept = [], []
        for k, m in enumerate(modules):
            mine = [p for _, p in self.named if owners.get(p) == [k]]
            if mine:
                name = names.get(m, f"unit {k}")
                built.append(Unit(name, mine, self.world_size, self.rank, self.param_dtype))
                kept.append(m)
        rest = [p for _, p in self.named if len(owners.get(p, [])) != 1]
        if rest:  # the root's own parameters and the ones units share
            built.append(Unit("root", rest, self.world_size, self.rank, self.param_dtype))
            kept.append(None)
        return built, kept

    def _refuse_state_dict(self, module, prefix, keep_vars) -> None:
        if any(not unit.gathered for unit in self.units):
            raise RuntimeError(
                "Zero3: between steps each rank holds only its shard of the parameters "
                "(the model's own tensors hold NaN): call optimizer.full_parameters() on "
                "every rank for the whole values, or save_sharded(model, optimizer, path) "
                "for a checkpoint"
            )

    def _gather(self, unit: Unit):
        """Start gathering ``unit`` (unless it is whole or on its way); the work, or None."""
        return unit.start_gather()

    def _use(self, unit: Unit) -> None:
        """Make ``unit`` whole: gather it (unless prefetched), and wait for it."""
        self._gather(unit)
        unit.wait()

    def _root_pre_forward(self, net, args) -> None:
        for unit in self.units if not in_backward() else ():  # a new pass: count afresh
            unit.ready = set()  # what arrived stays in unit.grad
        if self.root is not None:
            self._use(self.root)

    def _pre_forward(self, unit: Unit, module, args) -> None:
        if torch.is_grad_enabled() and len(self.order) < len(self.units) and unit not in self.order:
            self.order.append(unit)
        self._use(unit)
        if self.prefetch:
            self._prefetch(unit, +1)

    def _post_forward(self, unit: Unit, module, args, output) -> None:
        unit.free()  # reshard after forward
        if torch.is_grad_enabled():
            for t in tree_leaves(output):
                if torch.is_tensor(t) and t.requires_grad:
                    t.register_hook(partial(self._pre_backward, unit))

    def _pre_backward(self, unit: Unit, grad: torch.Tensor) -> torch.Tensor:
        self._use(unit)
        if self.prefetch:
            self._prefetch(unit, -1)
        return grad

    def _prefetch(self, unit: Unit, direction: int) -> None:
        if unit in self.order:
            k = self.order.index(unit) + direction
            if 0 <= k < len(self.order):
                self._gather(self.order[k])

    @torch.no_grad()
    def _grad_ready(self, unit: Unit, i: int, p: nn.Parameter) -> None:
        if unit.grad is None:
            unit.grad = unit.layout.empty()
        grad = p.grad.to(unit.grad.dtype)  # reduce in fp32 (param_dtype: bf16 gradients)
        unit.layout.views(unit.grad)[i].add_(grad, alpha=1.0 / self.world_size)
        p.grad = None
        self._got.add(self._index[id(p)])
        unit.ready.add(i)
        if len(unit.ready) == len(unit.layout.params):
            if self._syncing():
                self._reduce_scatter(unit)
            else:  # accumulate: the sum waits in unit.grad for a backward that syncs
                unit.free()
                unit.ready = set()

    def _reduce_scatter(self, unit: Unit):
        """Send the unit's gradient out, each rank to get its shard of the sum; the work."""
        unit.free()  # its backward is over: free the weights before the gradient goes out
        grad = unit.grad if unit.grad is not None else unit.layout.empty()
        out = torch.empty_like(unit.shard)
        work = reduce_scatter_single(out, grad, async_op=True)
        unit.pending.append((work, out))
        unit.grad, unit.ready = None, set()
        return work

    def _reduce(self) -> list[torch.Tensor]:
        for unit in self.units:  # unused parameters: zeros, in unit order on every rank
            if unit.ready or unit.grad is not None or not unit.pending:
                self._reduce_scatter(unit)  # an accumulated sum is never left behind
        return [self._reduced(unit) for unit in self.units]

    @torch.no_grad()
    def step(self, closure=None, **kwargs: Any) -> Any:
        loss = self._closure(closure)  # torch's contract: evaluate, then step
        self._step_pieces(self.reduced_grads(), self._got, **kwargs)
        return loss

    def _reduced(self, unit: Unit) -> torch.Tensor:
        """This rank's shard of the unit's summed gradients (zeros if none); frees it."""
        total = None
        for work, out in unit.pending:
            work.wait()
            total = out if total is None else total.add_(out)  # no copy for one backward
        unit.pending = []
        unit.free()
        return torch.zeros_like(unit.shard) if total is None else total

    def _discard_reduced(self) -> None:
        for unit in self.units:
            self._reduced(unit)  # waited for, and dropped
            unit.grad, unit.ready = None, set()

    @torch.no_grad()
    def full_parameters(self) -> list[torch.Tensor]:
        """Every trainable parameter, whole: the ranks' fp32 shards gathered, in
        ``named_parameters`` order (the master copy, not the compute dtype's)."""
        whole = {}
        for unit in self.units:
            flat = unit.layout.empty()
            all_gather_single(flat, unit.shard)
            whole.update(zip(map(id, unit.layout.params), unit.layout.views(flat)))
        return [whole[id(p)] for _, p in self.named]


def _cast_inputs(dtype: torch.dtype, net: nn.Module, args: tuple) -> tuple:
    return tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
