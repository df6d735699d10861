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
    index = {id(p): j for j, (_, p) in enumerate(stage.named)}
    state: dict[int, dict] = {j: {} for j in range(len(stage.named)) if has[j] > 0}
    for key, dtype in dtypes.items():
        for j in state:
            state[j][key] = torch.tensor(counters[key][j].item(), dtype=getattr(torch, dtype))
    for key, flats in moments.items():
        for (layout, _), mine in zip(stage.layouts, flats):
            full = layout.empty().to(mine.dtype)
            all_gather_single(full, mine)
            for p, view in zip(layout.params, layout.views(full)):
                if index[id(p)] in state:
                    state[index[id(p)]][key] = view.clone()
    (group,) = stage.inner.param_groups
    settings = {k: v for k, v in group.items() if k != "params"}
    return {"state": state, "param_groups": [{**settings, "params": list(range(len(index)))}]}


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
    groups, n = whole["param_groups"], len(stage.named)
    if len(groups) != 1 or list(groups[0]["params"]) != list(range(n)):
        raise ValueError(
            f"{name}.load_state_dict: the state is not of this model's {n} trainable parameters "
            f"in one group ({[len(g['params']) for g in groups]} parameters in "
            f"{len(groups)} group(s)): a shard's state (shard_state_dict()) loads with "
            f"load_shard_state_dict() on the rank and world size that saved it"
        )
    settings = {k: v for k, v in groups[0].items() if k != "params"}
    if not set(stage.inner.defaults) <= set(settings):  # a scheduler adds initial_lr: fine
        raise ValueError(
            f"{name}.load_state_dict: the state is another optimizer's than this stage's "
            f"{type(stage.inner).__name__} (its settings: {sorted(settings)}); build the "
            f"stage with the optimizer class it was saved with"
        )
    saved = {int(j): s for j, s in whole["state"].items()}
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
    state = {  # this rank's shard in the inner optimizer's own format: torch's load casts it
        i: {
            key: flat[key, k][where].clone()
            if torch.is_tensor(v) and v.dim() > 0
            else (v.clone() if torch.is_tensor(v) else v)  # Adam adds to its step in place
            for key, v in saved[j].items()
        }
        for i, (j, k, where, _) in enumerate(stage.pieces)
        if j in saved
    }
    mine = list(range(len(stage.shard_params)))
    stage.inner.load_state_dict({"state": state, "param_groups": [{**settings, "params": mine}]})
    stage.param_groups, stage.state = stage.inner.param_groups, stage.inner.state
