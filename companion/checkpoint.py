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

import os
import tempfile
from pathlib import Path

import torch
from torch import nn

from .dataparallel import DataParallelByHand

__all__ = [
    "unwrap",
    "strip_module_prefix",
    "load_into",
    "save_checkpoint",
    "load_checkpoint",
    "WRAPPERS",
]

WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel, DataParallelByHand)

_TMP_SUFFIX = ".tmp"


def unwrap(net: nn.Module) -> nn.Module:
    """The model inside ``nn.DataParallel``, DDP or DataParallelByHand; else ``net``."""
    while isinstance(net, WRAPPERS):
        net = net.module
    return net


def strip_module_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the leading ``module.`` that a wrapper adds to every key.

    Keys are left alone unless all of them carry the prefix, so a plain
    model's ``module.`` submodule (if it has one) is not renamed.
    """
    prefix = "module."
    while state and all(k.startswith(prefix) for k in state):
        state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def load_into(net: nn.Module, state: dict[str, torch.Tensor], strict: bool = True):
    """Load ``state`` (from a wrapped or plain model) into ``net``, wrapped or plain."""
    return unwrap(net).load_state_dict(strip_module_prefix(state), strict=strict)


def _temp_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"))


def save_checkpoint(net: nn.Module, path: str | Path) -> Path:
    """Write ``unwrap(net).state_dict()`` to ``path`` atomically; returns the path.

    The state dict goes to a hidden temporary file next to ``path``, is
    flushed to disk, and replaces ``path`` with ``os.replace``. If writing
    fails, the temporary file is removed and the old checkpoint is untouched.
    Temporary files left by a writer that was killed outright (no chance to
    clean up) are removed by the next save. Call it on one rank only.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"checkpoint path {path} is a directory; give a file name, "
            f"e.g. {path / 'model.pt'}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in _temp_files(path):
        stale.unlink(missing_ok=True)
    state = {k: v.detach().cpu() for k, v in unwrap(net).state_dict().items()}
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(net: nn.Module, path: str | Path) -> nn.Module:
    """Load a checkpoint written by :func:`save_checkpoint` into ``net``; returns it.

    ``net`` may be a plain model or a wrapped one, and so may the model that
    was saved (see :func:`load_into`). Tensors are read onto the CPU first, so
    a file saved on a GPU loads on a machine without one, then copied to
    wherever ``net``'s parameters are.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; train with checkpoint={str(path)!r} "
            f"(or --checkpoint) first"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    load_into(net, state)
    return net
