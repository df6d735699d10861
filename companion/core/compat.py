"""The torch versions the book runs on: the floor, and two collectives renamed in 2.13.

Used in: every chapter (the floor) and chapter 9 (the collectives).

The floor is the oldest torch that a CI leg runs the book on: Colab's
torch 2.11 (Python 3.13). Importing ``companion`` with an older torch raises
an ``ImportError`` that names both versions, instead of an ``AttributeError``
deep inside a chapter.

torch 2.13 added ``dist.reduce_scatter_single`` and ``dist.all_gather_single``;
2.14 deprecates the older names of the same collectives,
``reduce_scatter_tensor`` and ``all_gather_into_tensor`` (a ``FutureWarning``
at each call). :func:`reduce_scatter_single` and :func:`all_gather_single`
call the new name where torch has it and the old one otherwise. They look the
function up on ``torch.distributed`` at every call, so chapter 9's byte ledger
(:func:`companion.sharding.ledger.count_bytes`, which swaps the functions of
``torch.distributed`` for counting ones) sees every call, whichever torch.
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

__all__ = ["TORCH_FLOOR", "check_torch", "reduce_scatter_single", "all_gather_single"]

TORCH_FLOOR = "2.11"  # pyproject.toml says torch>=2.11 (tests/core/test_compat.py)


def _major_minor(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a torch version: {version!r} (expected e.g. '2.11.0+cu130')")
    return int(found[1]), int(found[2])


def check_torch(version: str = torch.__version__) -> str:
    """``version`` if it is at least :data:`TORCH_FLOOR`; an ``ImportError`` otherwise."""
    if _major_minor(version) < _major_minor(TORCH_FLOOR):
        raise ImportError(
            f"companion needs torch>={TORCH_FLOOR}, but torch {version} is installed: "
            f"upgrade it with pip install 'torch>={TORCH_FLOOR}' 'torchvision>=0.26' "
            f"(install the two together, so that their builds match)"
        )
    return version


def _new_or_old(new: str, old: str):
    """``dist.<new>`` where torch has it (2.13+), else ``dist.<old>``, looked up now."""
    return getattr(dist, new, None) or getattr(dist, old)


def reduce_scatter_single(output, input, *args, **kwargs):
    """Sum ``input`` over the ranks; this rank keeps its piece, ``output``."""
    return _new_or_old("reduce_scatter_single", "reduce_scatter_tensor")(
        output, input, *args, **kwargs
    )


def all_gather_single(output, input, *args, **kwargs):
    """Every rank's ``input``, put together in rank order into ``output``."""
    return _new_or_old("all_gather_single", "all_gather_into_tensor")(
        output, input, *args, **kwargs
    )


check_torch()  # on import: older torch stops here, with the message above
