"""The hand-written stages' state for ``torch.distributed.checkpoint``: saved on N, loaded on M.

Used in: chapter 9 (:func:`~.checkpoint.save_sharded` with ZeRO-1, 2 or 3).

DCP can reshard a tensor when it knows how the tensor is split: a DTensor.
A stage's layout is flat: the trainable parameters of a unit (or bucket)
laid end to end, padded to a multiple of N, cut into N equal shards. Without
its padding, rank ``r``'s shard is exactly the ``r``-th piece that
``torch.chunk`` cuts from the flat vector, which is what DTensor's
``Shard(0)`` placement means, and the flat vector's length does not depend
on N. So each layout's parameters, and each per-element optimizer state laid
out alike (Adam's two moments, SGD's momentum), is saved as one 1-D DTensor,
and a checkpoint that 2 ranks wrote loads on 1, 3 or 4. What every rank holds
whole (counters such as Adam's ``step``, the hyperparameters, frozen
parameters and buffers) is saved once.
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.tensor import DTensor, Shard

from ..core.checks import check_instance
from .flat import FlatShards
from .library import device_mesh
from .optim_state import _optimizer_state, _per_parameter, _zero_flats
from .zero1 import ShardedOptimizer

__all__ = ["stage_state", "load_stage_state"]


def _valid(layout: FlatShards) -> int:
    """How many numbers of this rank's shard are parameters, not padding."""
    return max(0, min(layout.shard_numel, layout.numel - layout.lo))


def _dtensor(local: torch.Tensor, layout: FlatShards, mesh) -> DTensor:
    """This rank's shard, padding dropped, as its piece of the flat vector of ``layout``."""
    shape = torch.Size([layout.numel])
    local = local[: _valid(layout)]
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=shape, stride=(1,))


def _signature(stage: ShardedOptimizer) -> list[list[str]]:
    names = {id(p): n for n, p in stage.named}
    return [[names[id(p)] for p in layout.params] for layout, _ in stage.layouts]


def _grouping(stage: ShardedOptimizer) -> list[list[str]]:
    """The names of each parameter group's parameters."""
    return [[stage.named[j][0] for j in js] for js, _ in stage._groups]


def _whole(stage: ShardedOptimizer) -> dict[str, torch.Tensor]:
    """Frozen parameters and persistent buffers: whole on every rank."""
    out = {n: p for n, p in stage.net.named_parameters() if not p.requires_grad}
    for name, m in stage.net.named_modules():
        for b, t in m.named_buffers(recurse=False):
            if b not in m._non_persistent_buffers_set:
                out[f"{name}.{b}" if name else b] = t
    return out


def _check_stage(stage: ShardedOptimizer) -> None:
    check_instance(
        stage,
        "stage",
        ShardedOptimizer,
        "pass a Zero1, Zero2 or Zero3 (save_sharded "
        "and load_sharded take FSDP2 and whole optimizers too)",
    )


def stage_state(stage: ShardedOptimizer) -> dict:
    """What DCP saves of a hand-written stage: its parameter shards and optimizer state."""
    _check_stage(stage)
    moments, counters, has, dtypes = _optimizer_state(stage)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in stage.inner.param_groups]
    layouts, moment_keys = _signature(stage), sorted(moments)
    try:
        meta = json.dumps(
            {
                "layouts": layouts,
                "groups": groups,
                "grouping": _grouping(stage),
                "moments": moment_keys,
                "counters": dtypes,
            }
        )
    except TypeError as error:
        raise TypeError(
            f"{type(stage).__name__}: the optimizer's settings must be numbers, booleans, "
            f"None or tuples of them to be saved ({error})"
        ) from None
    return {"meta": meta, **_as_saved(stage, moments, counters, has)}


def _as_saved(stage: ShardedOptimizer, moments: dict, counters: dict, has: torch.Tensor) -> dict:
    """The tensors DCP writes (or, filled with zeros, reads into): the parameter shards and
    each moment's flat shards as DTensors, the counters, the flags, the whole tensors."""
    mesh = device_mesh(stage.layouts[0][1].device.type)

    def dtensors(flats: list[torch.Tensor]) -> dict[str, DTensor]:
        return {
            str(k): _dtensor(f, layout, mesh)
            for k, ((layout, _), f) in enumerate(zip(stage.layouts, flats))
        }

    return {
        "params": dtensors([shard for _, shard in stage.layouts]),
        "optim": {key: dtensors(flats) for key, flats in moments.items()},
        "counters": counters,
        "has state": has,
        "whole": {name: t.detach().clone() for name, t in _whole(stage).items()},
    }


def _template(stage: ShardedOptimizer, meta: dict) -> dict:
    """Tensors shaped as this rank's part of what ``meta`` says was saved, to load into."""
    moments = {key: _zero_flats(stage) for key in meta["moments"]}
    counters = {key: _per_parameter(stage) for key in meta["counters"]}
    return _as_saved(stage, moments, counters, _per_parameter(stage))


def _saved_keys(path: str | os.PathLike) -> set[str]:
    """The names of everything a DCP checkpoint holds, as DCP flattens them
    (``model.fc.weight``, ``optim.state.fc.weight.exp_avg``, ...)."""
    return set(dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata)


@torch.no_grad()
def load_stage_state(stage: ShardedOptimizer, path: str) -> None:
    """Load what :func:`stage_state` saved into ``path``, whatever the saving world size:
    each rank reads the pieces of its own shards."""
    _check_stage(stage)
    planner = DefaultLoadPlanner(allow_partial_load=True)
    holder = {"meta": ""}
    dcp.load({"stage": holder}, checkpoint_id=path, planner=planner)
    meta = json.loads(holder["meta"])
    _check_same_layouts(stage, meta["layouts"])
    _check_same_rest(stage, meta, path)
    state = _template(stage, meta)
    dcp.load({"stage": state}, checkpoint_id=path, planner=planner)
    for (layout, shard), saved in zip(stage.layouts, state["params"].values()):
        shard[: _valid(layout)] = saved.to_local()
    stage.inner.state.clear()
    for j, k, where, piece in stage.pieces:
        if state["has state"][j] > 0:
            moments = {
                key: state["optim"][key][str(k)].to_local()[where].clone()
                for key in meta["moments"]
            }
            counters = {
                key: torch.tensor(state["counters"][key][j].item(), dtype=getattr(torch, dtype))
                for key, dtype in meta["counters"].items()
            }
            stage.inner.state[piece] = {**counters, **moments}
    for group, saved in zip(stage.inner.param_groups, meta["groups"]):
        group.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
    for name, t in _whole(stage).items():
        t.copy_(state["whole"][name])
    stage._whole_again()


def _check_same_rest(stage: ShardedOptimizer, meta: dict, path: str) -> None:
    """What the layouts do not say: the same frozen parameters and buffers, and an optimizer
    of the same class (its settings named alike, group by group)."""
    saved = {
        k.removeprefix("stage.whole.") for k in _saved_keys(path) if k.startswith("stage.whole.")
    }
    here = set(_whole(stage))
    if saved != here:
        raise ValueError(
            f"{type(stage).__name__}: the checkpoint's frozen parameters and buffers are not "
            f"this model's: not in it: {sorted(here - saved)}, not in this model: "
            f"{sorted(saved - here)}. Build the model it was saved from"
        )
    grouping = meta.get("grouping", [[name for name, _ in stage.named]])  # older: one group
    if grouping != _grouping(stage):
        raise ValueError(
            f"{type(stage).__name__}: the checkpoint's parameter groups are not this stage's "
            f"(saved: {grouping}, here: {_grouping(stage)}): build the stage with the "
            f"params= groups it was saved with"
        )
    mine = [sorted(k for k in g if k != "params") for g in stage.inner.param_groups]
    theirs = [sorted(g) for g in meta["groups"]]
    if mine != theirs:
        raise ValueError(
            f"{type(stage).__name__}: the checkpoint holds another optimizer than this stage's "
            f"{type(stage.inner).__name__}: its settings are {theirs}, this one's {mine}. Build "
            f"the stage with the optimizer class and options it was saved with"
        )


def _check_same_layouts(stage: ShardedOptimizer, saved: list[list[str]]) -> None:
    if saved != _signature(stage):
        raise ValueError(
            f"{type(stage).__name__}: the checkpoint's flat layouts ({len(saved)}: "
            f"{[len(names) for names in saved]} parameters) are not this stage's "
            f"({[len(names) for names in _signature(stage)]}): load it with the method, model "
            f"and units (or bucket size) it was saved with; the world size may differ"
        )
