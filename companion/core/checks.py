"""Argument checks shared by every chapter: each error names the argument, the value and the fix.

Used in: every chapter (public functions call them first, in small ``_check_...``
helpers, so that the function bodies that ``show`` prints read as the algorithm).
"""

from __future__ import annotations

import argparse
import math
import numbers
from typing import Any, Iterable, Sized

__all__ = [
    "check_int",
    "check_positive",
    "check_choice",
    "check_not_empty",
    "check_module",
    "positive_arg",
]


def _fix(hint: str) -> str:
    return f": {hint}" if hint else ""


def check_int(value: Any, name: str, minimum: int = 1, hint: str = "") -> int:
    """``value`` if it is an integer (a bool is not) of at least ``minimum``.

    ``TypeError`` for another type (a float world size, ``True``), ``ValueError``
    for a small one; both name ``name`` and the value, then ``hint``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}{_fix(hint)}"
        )
    if value < minimum:
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r}{_fix(hint)}"
        )
    return int(value)


def check_positive(value: Any, name: str, hint: str = "") -> float:
    """``value`` if it is a positive, finite real number (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a positive, finite number, got {value!r} of type "
            f"{type(value).__name__}{_fix(hint)}"
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"{name} must be a positive, finite number, got {value!r}{_fix(hint)}"
        )
    return value


def check_choice(value: Any, name: str, choices: Iterable) -> Any:
    """``value`` if it is one of ``choices``; ``ValueError`` listing them else."""
    choices = list(choices)
    try:
        known = value in choices
    except TypeError:  # an unhashable value looked up in a dict's keys
        known = False
    if not known:
        raise ValueError(f"unknown {name} {value!r}; choose one of {choices}")
    return value


def check_not_empty(data: Sized, name: str, hint: str = "") -> Sized:
    """``data`` if it holds at least one sample; ``ValueError`` naming ``name`` else."""
    if len(data) == 0:
        raise ValueError(f"{name} is empty (0 samples){_fix(hint)}")
    return data


def check_module(net: Any, name: str = "net") -> Any:
    """``net`` if it is a ``torch.nn.Module``; ``TypeError`` naming ``name`` else."""
    from torch import nn

    if not isinstance(net, nn.Module):
        raise TypeError(
            f"{name} must be a torch.nn.Module (a model), got {type(net).__name__}"
        )
    return net


def positive_arg(kind: type):
    """An argparse ``type``: a number of ``kind`` (``int`` or ``float``) > 0, finite.

    ``--epochs 0``, ``--lr inf`` or ``--lr nan`` then end in argparse's usage
    message naming the option, instead of a traceback later.
    """

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(
                f"must be a positive, finite {kind.__name__}, got {text!r}"
            )
        return value

    parse.__name__ = kind.__name__
    return parse
