"""What a ZeRO-3 parameter is between steps: a stand-in, and a clear error when it is read.

Used in: chapter 9 (by :class:`~.zero3.Zero3`).

After a unit's forward and backward its buffer is freed. Each parameter
then keeps its shape but points at one shared NaN (``_placeholder``),
so that nothing reads memory that was given back. A reader who looks at
``net.fc.weight`` between steps would see NaNs, which are no answer either:
:func:`guard_reads` gives every module that owns such a parameter a class
whose attribute lookup raises an error naming what to call instead. The
module stays an instance of its class (``Zero3Linear`` is a ``Linear``),
as FSDP2 does when it turns a ``Linear`` into an ``FSDPLinear``. Inside
forward the unit is whole, and the lookup returns the parameter as usual.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["is_placeholder", "guard_reads", "FreedParameterRead"]

_NAN: dict[tuple, torch.Tensor] = {}
_GUARDED: dict[type, type] = {}


class FreedParameterRead(RuntimeError):
    """A ZeRO-3 parameter was read between steps, when no rank holds it whole."""


def _placeholder(p: torch.Tensor) -> torch.Tensor:
    """A freed parameter's stand-in: its shape, one shared NaN behind every number."""
    key = (p.dtype, p.device)
    if key not in _NAN:
        _NAN[key] = torch.full((1,), float("nan"), dtype=p.dtype, device=p.device)
    return _NAN[key].expand(p.shape)


def is_placeholder(t: torch.Tensor) -> bool:
    """Whether ``t`` is a freed ZeRO-3 parameter's stand-in (it holds no memory of its own)."""
    ptr = t.untyped_storage().data_ptr()
    return any(ptr == nan.untyped_storage().data_ptr() for nan in _NAN.values())


def _guarded_getattr(self: nn.Module, name: str):
    value = nn.Module.__getattr__(self, name)
    if isinstance(value, nn.Parameter) and is_placeholder(value):
        raise FreedParameterRead(
            f"{type(self).__name__}.{name} is sharded by ZeRO-3: between steps each rank "
            f"holds only its shard, so there is no whole value to read here. Call "
            f"optimizer.full_parameters() on every rank (one flat vector of the trainable "
            f"parameters, in model.parameters() order), or read it inside forward"
        )
    return value


def guard_reads(modules: list[nn.Module]) -> None:
    """Give each of ``modules`` a subclass of its class that refuses to hand out a freed
    parameter (see the module's docstring); a module guarded already is left as it is."""
    for module in modules:
        cls = type(module)
        if cls in _GUARDED.values():
            continue
        if cls not in _GUARDED:
            _GUARDED[cls] = type(
                f"Zero3{cls.__name__}",
                (cls,),
                {
                    "__getattr__": _guarded_getattr,
                    "__module__": cls.__module__,
                },
            )
        module.__class__ = _GUARDED[cls]
