"""Chapter 11's exercise checker: a fingerprint of your own, held to what the chapter's sees.

``check_fingerprint(fn)`` takes ``fn(tensor) -> a number or a 0-dimensional tensor``
and checks, on tensors of fp32 and fp64: the same bits give the same value, at 1, 2
and 4 threads; one flipped bit anywhere (every bit of the first, a middle and the
last element) changes it; two elements that trade places change it, a value
and its negative too; ``-0.0`` against ``+0.0`` changes it. ``torch.hash_tensor``, an XOR of the bits, fails the
swap; the sum of the values fails most of them. It prints the cases, never a
fingerprint that passes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .verdicts import Verdicts, attempt

__all__ = ["check_fingerprint"]

INTS = {torch.float32: torch.int32, torch.float64: torch.int64}


def _value(fn: Callable, t: torch.Tensor):
    out, problem = attempt(fn, t)
    if problem:
        return None, problem
    if torch.is_tensor(out):
        if out.numel() != 1:
            return None, f"returned a tensor of {out.numel()} elements: return one number"
        out = out.item()
    return out, ""


def _flips(t: torch.Tensor):
    ints = INTS[t.dtype]
    for element in (0, t.numel() // 2, t.numel() - 1):
        for bit in range(8 * t.element_size()):
            flipped = t.clone()
            flipped.view(ints)[element] ^= torch.tensor(1, dtype=ints) << bit
            yield element, bit, flipped


def _same_at_each_thread_count(fn: Callable, t: torch.Tensor) -> tuple[bool, str]:
    before, seen = torch.get_num_threads(), []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            value, problem = _value(fn, t)
            if problem:
                return False, problem
            seen.append(value)
    finally:
        torch.set_num_threads(before)
    return len(set(seen)) == 1, f"got {seen} at 1, 2 and 4 threads: sum integers, not floats"


def check_fingerprint(fn: Callable, quiet: bool = False) -> Verdicts:
    """Check ``fn(tensor)`` against what chapter 11's ``fingerprint`` sees (see the module)."""
    if not callable(fn):
        raise TypeError(f"check_fingerprint needs your fingerprint function, got {fn!r}")
    name = getattr(fn, "__name__", "fn")
    verdicts = Verdicts(f"{name} on fp32 and fp64 tensors of 1,001 and 300,007 elements", quiet)
    for dtype in (torch.float32, torch.float64):
        g = torch.Generator().manual_seed(0)
        t = torch.randn(1001, generator=g, dtype=dtype)
        kind = str(dtype).removeprefix("torch.")
        first, problem = _value(fn, t)
        again, _ = _value(fn, t.clone())
        verdicts.add(f"{kind}: the same bits give the same value", not problem and first == again,
                     problem or f"got {first!r}, then {again!r}")  # fmt: skip
        missed = [(e, b) for e, b, f in _flips(t) if _value(fn, f)[0] == first]
        verdicts.add(f"{kind}: every one-bit flip is seen", not problem and not missed,
                     f"{len(missed)} flips missed, e.g. element {missed[:1]} (element, bit)")  # fmt: skip
        swapped = t.clone()
        swapped[[3, 700]] = t[[700, 3]]
        verdicts.add(f"{kind}: two elements that trade places are seen",
                     not problem and _value(fn, swapped)[0] != first,
                     "weigh each element by its position")  # fmt: skip
        signed = t.clone()
        signed[700] = -t[3]
        traded = signed.clone()
        traded[[3, 700]] = signed[[700, 3]]
        verdicts.add(f"{kind}: a value and its negative that trade places are seen",
                     not problem and _value(fn, traded)[0] != _value(fn, signed)[0],
                     "their bits differ by the sign's bit alone: 2^31 or 2^63, which an even "
                     "weight difference can wrap to 0 mod 2^64")  # fmt: skip
    zeros = torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])
    verdicts.add("-0.0 and +0.0 are told apart", _value(fn, zeros[0])[0] != _value(fn, zeros[1])[0],
                 "read the bits, not the values")  # fmt: skip
    big = torch.randn(300_007, generator=torch.Generator().manual_seed(1))
    ok, why = _same_at_each_thread_count(fn, big)
    verdicts.add("the same value at 1, 2 and 4 threads", ok, why)
    return verdicts
