"""Argument checks shared by every chapter: each error names the argument, the value and the fix.

Used in: every chapter (public functions call them first, in small ``_check_...``
helpers, so that the function bodies that ``show`` prints read as the algorithm).
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Iterable, Sized
from typing import Any

__all__ = [
    "check_int",
    "check_positive",
    "check_choice",
    "check_not_empty",
    "check_module",
    "positive_arg",
    "check_tensor",
    "check_batch",
    "check_distinct",
    "check_micro_batches",
    "check_step",
    "profile_arg",
    "PROFILE_HELP",
    "DefaultsHelp",
    "RawDefaultsHelp",
    "count_arg",
    "check_port",
    "check_data",
    "check_sequence",
    "check_instance",
    "check_lr",
    "check_training",
]

#: the one help text of every command line's ``--profile``
PROFILE_HELP = "ci, cpu or gpu (default: $BOOK_PROFILE, else chosen from the hardware)"


def _fix(hint: str) -> str:
    return f": {hint}" if hint else ""


def check_int(
    value: Any, name: str, minimum: int = 1, hint: str = "", maximum: int | None = None
) -> int:
    """``value`` if it is an integer (not a bool) of at least ``minimum`` (at most ``maximum``).

    ``TypeError`` for another type (a float world size, ``True``), ``ValueError``
    for a small (or large) one; both name ``name`` and the value, then ``hint``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}{_fix(hint)}"
        )
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}{_fix(hint)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value!r}{_fix(hint)}")
    return int(value)


def check_positive(value: Any, name: str, hint: str = "") -> float:
    """``value`` if it is a positive, finite real number (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a positive, finite number, got {value!r} of type "
            f"{type(value).__name__}{_fix(hint)}"
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive, finite number, got {value!r}{_fix(hint)}")
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
        raise TypeError(f"{name} must be a torch.nn.Module (a model), got {type(net).__name__}")
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


def check_tensor(value: Any, name: str, hint: str = "") -> Any:
    """``value`` if it is a ``torch.Tensor``; ``TypeError`` naming ``name`` else."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}{_fix(hint)}")
    return value


def check_batch(net: Any, X: Any, y: Any, loss_fn: Any = None) -> None:
    """``(X, y)`` as a training step takes them, checked before torch sees them.

    ``X``: a tensor in the floating dtype of ``net``'s parameters (a float64 or uint8
    batch into a float32 model fails deep inside a layer), or any floating one if the
    model casts its inputs (``MathMode("fp64").place``); ``y``: a tensor with one entry
    per sample; with ``nn.CrossEntropyLoss``, a 1-D ``y`` must hold class labels.
    """
    from torch import nn

    check_tensor(X, "X", "pass the batch's inputs as one tensor")
    check_tensor(y, "y", "pass the batch's labels as one tensor")
    param = next((p for p in net.parameters() if p.is_floating_point()), None)
    cast = X.is_floating_point() and _casts_inputs(net)
    if param is not None and X.dtype != param.dtype and not cast:
        raise TypeError(
            f"X has dtype {X.dtype} but the model's parameters are {param.dtype}: "
            f"convert the batch with X.to({param.dtype}) (images: X.float() / 255)"
        )
    if isinstance(loss_fn, nn.CrossEntropyLoss) and y.dim() == 1 and y.is_floating_point():
        raise TypeError(
            f"y holds {y.dtype} values, not class labels: pass integer labels "
            f"(y.long()), one per sample"
        )
    if X.dim() == 0 or len(X) != len(y):
        raise ValueError(
            f"X holds {len(X) if X.dim() else 0} samples but y {len(y) if y.dim() else 0} "
            f"labels: give one label per sample"
        )


def _casts_inputs(net: Any) -> bool:
    """Whether the model, or a wrapper around it (``.module``), casts the inputs itself."""
    modules = (net, getattr(net, "module", net))
    return any(
        getattr(hook, "casts_inputs", False)
        for m in modules
        for hook in getattr(m, "_forward_pre_hooks", {}).values()
    )


def check_distinct(values: Iterable, name: str) -> list:
    """``values`` as a list if no value repeats; ``ValueError`` naming the repeats else."""
    values = list(values)
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{name} repeats {repeated} in {values}: give each value once")
    return values


def profile_arg(text: str) -> str:
    """An argparse ``type`` for ``--profile``: one of the profiles' names."""
    from .profiles import PROFILES

    if text.lower() not in PROFILES:
        raise argparse.ArgumentTypeError(
            f"unknown profile {text!r}; valid profiles are: {', '.join(sorted(PROFILES))}"
        )
    return text.lower()


def check_micro_batches(micro_batches: Any, y: Any) -> int:
    """``micro_batches`` if it is an integer from 1 to the ``len(y)`` samples of the batch.

    More micro-batches than samples would train on empty slices (a ``nan`` loss).
    """
    check_int(micro_batches, "micro_batches", 1)
    if micro_batches > len(y):
        raise ValueError(
            f"micro_batches={micro_batches} is more than the batch's {len(y)} samples, "
            f"so some micro-batches would be empty: use at most {len(y)} (the last "
            f"batch of an epoch may be smaller), or a larger batch"
        )
    return micro_batches


def check_step(net: Any, X: Any, y: Any, loss_fn: Any, micro_batches: int = 1) -> None:
    """:func:`check_batch` and :func:`check_micro_batches`: a step's inputs, in one call."""
    check_batch(net, X, y, loss_fn)
    check_micro_batches(micro_batches, y)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, unless its help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default:" in text or action.default in (None, False, argparse.SUPPRESS):
            return text  # None / False: the help says what "not given" means
        return super()._get_help_string(action)


class RawDefaultsHelp(DefaultsHelp, argparse.RawDescriptionHelpFormatter):
    """:class:`DefaultsHelp` that prints the description as written (a module docstring)."""


def count_arg(text: str) -> int:
    """An argparse ``type``: an integer >= 0 (``--workers 0`` is a value, ``-1`` is not)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def check_port(port: Any, name: str = "port") -> Any:
    """``port`` if it is ``None`` or a TCP port number, 0 to 65535 (0: the OS picks one)."""
    if port is None:
        return port
    hint = "give a TCP port from 1 to 65535, or None (or 0) to let the OS pick a free one"
    return check_int(port, name, 0, hint, maximum=65535)


def check_data(data: Any, name: str = "data") -> Any:
    """``data`` if it is a ``companion.core.Data`` (name, train and test sets, classes)."""
    from .data import Data

    if not isinstance(data, Data):
        raise TypeError(
            f"{name} must be a companion.core.Data (a name, a train and a test set, the "
            f"classes), got {type(data).__name__}: use load_data(profile), or "
            f"Data(name, ImageSet(images, labels), ImageSet(...), classes)"
        )
    return data


def check_sequence(value: Any, name: str, what: str, minimum: int = 0) -> Any:
    """``value`` if it is a list or tuple of at least ``minimum`` items (``what`` they are)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of {what}, got {type(value).__name__}")
    if len(value) < minimum:
        raise ValueError(f"{name} must hold at least {minimum} item(s), {what}; got {value!r}")
    return value


def check_instance(value: Any, name: str, kind: type, hint: str) -> Any:
    """``value`` if it is a ``kind``; ``TypeError`` naming ``name``, the type and ``hint`` else."""
    if not isinstance(value, kind):
        raise TypeError(
            f"{name} must be of type {kind.__name__}, got {type(value).__name__}{_fix(hint)}"
        )
    return value


def check_lr(lr: float) -> float:
    """``lr`` if it is a positive, finite learning rate; ``ValueError``/``TypeError`` else."""
    return check_positive(lr, "lr", "pass a learning rate such as 0.1")


def check_training(epochs: int, lr: float, train_iter, test_iter) -> None:
    """The checks every ``train`` function shares: epochs, lr, non-empty iterators."""
    check_int(epochs, "epochs", 1)
    check_lr(lr)
    for name, it in (("train_iter", train_iter), ("test_iter", test_iter)):
        if hasattr(it, "__len__") and len(it) == 0:
            raise ValueError(f"{name} is empty (0 minibatches): give it a data set with samples")
