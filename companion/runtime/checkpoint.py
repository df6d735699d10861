"""Checkpoints: the unwrapped model's state dict, written atomically by one rank.

Used in: chapters 4 and 5 (chapter 8 extends it to complete snapshots).

Three rules. Save the *unwrapped* model (``ddp_net.module.state_dict()``):
its keys have no ``module.`` prefix, so a plain model loads it. Save on one
rank only (rank 0): every replica holds the same parameters, and several
writers would race on one file. Write atomically: the bytes go to a
temporary file in the same directory, which ``os.replace`` then renames over
the old checkpoint in one step, so a crash mid-write leaves the previous
checkpoint whole.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from ..core.files import atomic_write

__all__ = [
    "WRAPPERS",
    "register_wrapper",
    "unwrap",
    "strip_module_prefix",
    "load_into",
    "save_checkpoint",
    "load_checkpoint",
    "CheckpointError",
]

# Modules that hold the real model in ``.module``; chapter packages add theirs.
WRAPPERS: list[type] = [nn.DataParallel, nn.parallel.DistributedDataParallel]


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or does not fit the model."""


def register_wrapper(cls: type) -> type:
    """Mark ``cls`` as a wrapper whose ``.module`` is the model; usable as a decorator."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"cls must be a subclass of nn.Module, got {cls!r}")
    if cls not in WRAPPERS:
        WRAPPERS.append(cls)
    return cls


def unwrap(net: nn.Module) -> nn.Module:
    """The model inside any registered wrapper (``nn.DataParallel``, DDP, ...); else ``net``."""
    while isinstance(net, tuple(WRAPPERS)):
        net = net.module
    return net


def strip_module_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the leading ``module.`` that a wrapper adds to every key.

    Keys are left alone unless all of them carry the prefix, so a plain
    model's ``module.`` submodule (if it has one) is not renamed. The
    stripping itself is torch's
    ``torch.nn.modules.utils.consume_prefix_in_state_dict_if_present``.
    """
    _check_state(state)
    state = OrderedDict(state)
    while state and all(k.startswith("module.") for k in state):
        consume_prefix_in_state_dict_if_present(state, "module.")
    return state


def load_into(net: nn.Module, state: dict[str, torch.Tensor], strict: bool = True):
    """Load ``state`` (from a wrapped or plain model) into ``net``, wrapped or plain."""
    return unwrap(net).load_state_dict(strip_module_prefix(state), strict=strict)


def _check_not_sharded(state: dict) -> None:
    if any(isinstance(v, DTensor) for v in state.values()):
        raise ValueError(
            "save_checkpoint: this model's parameters are sharded by FSDP2 (DTensors): "
            "save them with companion.sharding.save_sharded, called on every rank"
        )


def save_checkpoint(net: nn.Module, path: str | Path) -> Path:
    """Write ``unwrap(net).state_dict()`` to ``path`` atomically; returns the path.

    The tensors are copied to the CPU first, so the file loads anywhere.
    Call it on one rank only.
    """
    state = unwrap(net).state_dict()  # ZeRO-3 refuses here: no rank holds it whole
    _check_not_sharded(state)
    state = {k: v.detach().cpu() for k, v in state.items()}
    return atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(net: nn.Module, path: str | Path) -> nn.Module:
    """Load a checkpoint written by :func:`save_checkpoint` into ``net``; returns it.

    ``net`` may be a plain model or a wrapped one, and so may the model that
    was saved (see :func:`load_into`). Tensors are read onto the CPU first, so
    a file saved on a GPU loads on a machine without one, then copied to
    wherever ``net``'s parameters are. A file that is not a checkpoint, or
    one of another model, raises :class:`CheckpointError` saying so.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; train with checkpoint={str(path)!r} (or --checkpoint) first"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(err).__name__}); it may be "
            f"empty, truncated or another kind of file: save it again with "
            f"save_checkpoint"
        ) from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(
            f"{path} holds a {type(state).__name__}, not a model's state dict: "
            f"load a file written by save_checkpoint"
        )
    try:
        load_into(net, state)
    except RuntimeError as err:
        raise CheckpointError(
            f"{path} does not fit this {type(unwrap(net)).__name__}: "
            f"{str(err).splitlines()[0]} Build the same model that was saved."
        ) from err
    return net


def _check_state(state) -> None:
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state must be a state dict (parameter names to tensors), got "
            f"{type(state).__name__}: pass net.state_dict() or torch.load(path)"
        )
