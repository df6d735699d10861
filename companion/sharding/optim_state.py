"""A hand-written stage's optimizer state, laid out flat, and gathered whole.

Used in: chapter 9 (:mod:`.flat_state` saves it with DCP; the stages' ``state_dict()``).

Every rank's inner optimizer holds state for its pieces only. ``_optimizer_state``
lays each per-element state (Adam's moments, SGD's momentum) out as one flat shard per
layout, as the parameters are, and each counter (Adam's ``step``) as one number per
parameter. :func:`whole_state` gathers those into what a plain optimizer over the
model's trainable parameters would hold (``consolidate_state_dict``), and
:func:`load_whole_state` hands each rank its pieces of such a state, at any world size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..core.compat import all_gather_single

SHARD_OF = "shard of"  # the key that marks shard_state_dict()'s dicts: {"rank", "world_size"}


def _forget_consolidated(stage: Any, *_) -> None:
    """A step hook: the whole state gathered before it is stale. ``stage`` is a weak
    reference, so that the inner optimizer does not keep its stage alive."""
    if stage() is not None:
        stage()._consolidated = None


def param_groups_of(stage: Any, params: Any, name: str) -> list[tuple[list[int], dict]]:
    """``params`` as the stage's groups: ``(indices into stage.named, options)`` each.
    ``None`` is one group of every trainable parameter; otherwise what torch's optimizers
    take (parameters, or dicts with ``"params"`` and options), which must hold each
    trainable parameter of the model exactly once (the stage shards all of them)."""
    if params is None:
        return [(list(range(len(stage.named))), {})]
    if isinstance(params, (torch.Tensor, dict)):
        params = [params]
    try:
        groups = list(params)
    except TypeError:
        groups = None
    if not groups:
        raise TypeError(
            f"{name}: params must be the model's trainable parameters or a list of groups "
            f"(dicts with 'params'), as torch's optimizers take them, got {params!r}"
        )
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    names = {id(p): n for n, p in stage.net.named_parameters()}
    out, seen = [], {}
    for g, group in enumerate(groups):
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: group {g} must be a dict with 'params', got {group!r}")
        members = group["params"]
        members = [members] if isinstance(members, torch.Tensor) else list(members)
        js = []
        for p in members:
            if id(p) not in stage._index:
                what = "a frozen parameter" if id(p) in names else "not a parameter of the model"
                label = names.get(id(p), f"a tensor of shape {tuple(getattr(p, 'shape', ()))}")
                raise ValueError(
                    f"{name}: group {g} holds {label}, {what}: the groups hold the model's "
                    f"trainable parameters, each once"
                )
            j = stage._index[id(p)]
            if j in seen:
                raise ValueError(
                    f"{name}: {stage.named[j][0]} is in group {seen[j]} and group {g}: "
                    f"put each parameter in one group"
                )
            seen[j] = g
            js.append(j)
        out.append((js, {k: v for k, v in group.items() if k != "params"}))
    missing = [n for j, (n, _) in enumerate(stage.named) if j not in seen]
    if missing:
        raise ValueError(
            f"{name}: the groups leave out trainable parameters {missing}: the stage shards "
            f"and steps every one; put them in a group (or set requires_grad=False first)"
        )
    return out


def _zero_flats(stage: Any) -> list[torch.Tensor]:
    """One zero shard per layout: where a per-element optimizer state is laid out."""
    return [torch.zeros_like(shard) for _, shard in stage.layouts]


def _per_parameter(stage: Any) -> torch.Tensor:
    """One float64 zero per trainable parameter, where the shards are (nccl reduces only
    GPU tensors): a counter's value, or a flag."""
    return torch.zeros(len(stage.named), dtype=torch.float64, device=stage.layouts[0][1].device)


def _optimizer_state(stage: Any) -> tuple[dict, dict, torch.Tensor, dict]:
    """``(moments, counters, has, dtypes)``: each per-element state as one flat shard per
    layout, each scalar one as a value per parameter, which parameters have state, and
    each counter's dtype; the same keys on every rank."""
    moments, counters, dtypes, has = {}, {}, {}, _per_parameter(stage)
    for j, k, where, piece in stage.pieces:
        for key, v in stage.inner.state.get(piece, {}).items():
            if torch.is_tensor(v) and v.dim() == 0:
                counters.setdefault(key, _per_parameter(stage))[j] = float(v)
                dtypes[key] = str(v.dtype).removeprefix("torch.")
            elif torch.is_tensor(v) and v.shape == piece.shape:
                moments.setdefault(key, _zero_flats(stage))[k][where] = v
            else:
                _cannot_save(stage, key)
            has[j] = 1.0
    keys = [None] * stage.world_size  # a rank whose shard is all padding has none
    dist.all_gather_object(keys, (sorted(moments), dtypes))
    for key in {key for mine, _ in keys for key in mine}:
        moments.setdefault(key, _zero_flats(stage))
    for _, theirs in keys:
        dtypes.update(theirs)
    for key in dtypes:
        counters.setdefault(key, _per_parameter(stage))
    for t in [has, *counters.values()]:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the same on every rank that has a piece
    return moments, counters, has, dtypes


def _cannot_save(stage: Any, key: str):
    raise NotImplementedError(
        f"{type(stage).__name__}: the optimizer's state {key!r} is neither a number nor shaped "
        f"like its parameter, so it cannot be laid out flat: save with torch.save per rank"
    )


@torch.no_grad()
def whole_state(stage: Any) -> dict:
    """The optimizer state of every rank gathered into one whole ``state_dict``: what a plain
    optimizer over the model's trainable parameters (``named_parameters`` order) would hold
    after the same steps. A collective: every rank calls it, and gets it."""
    moments, counters, has, dtypes = _optimizer_state(stage)
    state: dict[int, dict] = {j: {} for j in range(len(stage.named)) if has[j] > 0}
    for key, dtype in dtypes.items():
        for j in state:
            state[j][key] = torch.tensor(counters[key][j].item(), dtype=getattr(torch, dtype))
    for key, flats in moments.items():
        for (layout, _), mine in zip(stage.layouts, flats):
            full = layout.empty().to(mine.dtype)
            all_gather_single(full, mine)
            for p, view in zip(layout.params, layout.views(full)):
                if stage._index[id(p)] in state:
                    state[stage._index[id(p)]][key] = view.clone()
    at = {j: i for i, j in enumerate(stage._order)}  # a plain optimizer numbers by group
    state = {at[j]: state[j] for j in stage._order if j in state}
    groups = []
    for (js, _), group in zip(stage._groups, stage.inner.param_groups):
        settings = {k: v for k, v in group.items() if k != "params"}
        groups.append({**settings, "params": [at[j] for j in js]})
    return {"state": state, "param_groups": groups}


@torch.no_grad()
def load_whole_state(stage: Any, whole: dict) -> None:
    """Load a whole ``state_dict`` (:func:`whole_state`'s, or a plain optimizer's over the
    same trainable parameters, saved at any world size): each rank keeps its pieces."""
    name = type(stage).__name__
    if isinstance(whole, dict) and SHARD_OF in whole:
        raise ValueError(
            f"{name}.load_state_dict: this is one rank's shard ({whole[SHARD_OF]}), from "
            f"shard_state_dict(): load it with load_shard_state_dict() on that rank and world size"
        )
    if not (isinstance(whole, dict) and {"state", "param_groups"} <= set(whole)):
        raise TypeError(f"{name}.load_state_dict: pass what state_dict() returned, got {whole!r}")
    groups, sizes = whole["param_groups"], [len(js) for js, _ in stage._groups]
    if [len(g["params"]) for g in groups] != sizes or [i for g in groups for i in g["params"]] != (
        list(range(sum(sizes)))
    ):
        raise ValueError(
            f"{name}.load_state_dict: the state is not of this model's trainable parameters "
            f"in this stage's groups ({sizes} parameters; the state: "
            f"{[len(g['params']) for g in groups]}): build the stage with the groups it was "
            f"saved with; a shard's state (shard_state_dict()) loads with "
            f"load_shard_state_dict() on the rank and world size that saved it"
        )
    settings = [{k: v for k, v in g.items() if k != "params"} for g in groups]
    if not all(set(stage.inner.defaults) <= set(s) for s in settings):  # initial_lr: fine
        raise ValueError(
            f"{name}.load_state_dict: the state is another optimizer's than this stage's "
            f"{type(stage.inner).__name__} (its settings: {sorted(settings[0])}); build the "
            f"stage with the optimizer class it was saved with"
        )
    saved = {stage._order[int(i)]: s for i, s in whole["state"].items()}
    for j, (pname, p) in enumerate(stage.named):
        for key, v in saved.get(j, {}).items():
            if torch.is_tensor(v) and v.dim() > 0 and v.shape != p.shape:
                raise ValueError(
                    f"{name}.load_state_dict: state {key!r} of {pname} has shape "
                    f"{tuple(v.shape)}, the parameter {tuple(p.shape)}: another model's state"
                )
    flat = {}  # (key, layout): this rank's shard of the moment, laid out flat
    for k, (layout, shard) in enumerate(stage.layouts):
        keys = {
            key
            for p in layout.params
            for key, v in saved.get(stage._index[id(p)], {}).items()
            if torch.is_tensor(v) and v.dim() > 0
        }
        for key in keys:
            tensors = [saved.get(stage._index[id(p)], {}).get(key) for p in layout.params]
            full = layout.flatten([None if t is None else t.to(shard) for t in tensors])
            flat[key, k] = layout.shard(full)
    at = {id(piece): i for i, piece in enumerate(stage.shard_params)}  # the inner's numbers
    state = {  # this rank's shard in the inner optimizer's own format: torch's load casts it
        at[id(piece)]: {
            key: flat[key, k][where].clone()
            if torch.is_tensor(v) and v.dim() > 0
            else (v.clone() if torch.is_tensor(v) else v)  # Adam adds to its step in place
            for key, v in saved[j].items()
        }
        for j, k, where, piece in stage.pieces
        if j in saved
    }
    mine = [
        {**options, "params": [at[id(p)] for p in group["params"]]}
        for options, group in zip(settings, stage.inner.param_groups)
    ]
    stage.inner.load_state_dict({"state": state, "param_groups": mine})
    stage.param_groups, stage.state = stage.inner.param_groups, stage.inner.state
