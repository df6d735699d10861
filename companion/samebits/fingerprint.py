"""Replicas that prove, every step, that they hold the same bits.

Used in: chapter 11.

A fingerprint of a tensor is one 64-bit integer: the sum, with wrap-around,
of each 32-bit word of its bits (an fp64 element is two words), read as a
signed integer, times a fixed odd weight drawn for the word's position.
Integer sums wrap the same whatever their order, so it does not depend on
the thread count (torch's integer arithmetic wraps on overflow on the CPU and
on CUDA, though it does not promise to). What it sees and what it does not:

* any one flipped bit: a word changes by ``2^k`` with ``k < 32``, the sum by
  that times an odd weight, never a multiple of ``2^64``;
* two words that trade places: seen unless their weights happen to differ
  by a multiple of ``2^64`` over the difference of their bits, about one
  chance in ``2^32`` (words, not 64-bit elements, so that a sign's bit is
  never ``2^63`` away; ``torch.hash_tensor`` XORs the bits, which no order
  changes, so it misses every swap);
* ``-0.0`` against ``+0.0`` and NaNs with other payloads: seen (bits, not
  values);
* a wrong value that every rank shares, such as a flip before the
  gradients' exchange: not seen. Fingerprints prove the replicas agree,
  not that they are right.

The weights cost memory: one 64-bit integer per word of each parameter size,
kept for the run (twice an fp32 model's size). :class:`ReplicaWatch`
all-gathers one fingerprint per parameter tensor after each step (8 bytes a
tensor, a rank) and keeps the first step and parameter at which the ranks
part, and which ranks: those outside the majority, when there is one (with
two ranks there is none, and both are named).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..core.compat import all_gather_single

__all__ = ["fingerprint", "Parted", "ReplicaWatch"]

_INTS = {4: torch.int32, 2: torch.int16, 1: torch.uint8}
_WEIGHTS: dict[tuple[int, str], torch.Tensor] = {}  # (numel, device): odd int64 weights


def _weights(numel: int, device: torch.device) -> torch.Tensor:
    key = (numel, str(device))
    if key not in _WEIGHTS:
        seeded = torch.Generator().manual_seed(numel)
        drawn = torch.randint(-(2**62), 2**62, (numel,), generator=seeded, dtype=torch.int64)
        _WEIGHTS[key] = (drawn * 2 + 1).to(device)  # odd: a flipped bit always shows
    return _WEIGHTS[key]


@torch.no_grad()
def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """A 64-bit integer (a 0-dimensional tensor) of ``t``'s bits and their positions."""
    words = _INTS[min(t.element_size(), 4)]  # 32-bit words at most: see the module
    bits = t.detach().contiguous().reshape(-1).view(words).to(torch.int64)
    return (bits * _weights(bits.numel(), bits.device)).sum()


class Parted(NamedTuple):
    """The first step after which two replicas held different bits, and where."""

    step: int
    parameter: str
    ranks: list[int]  # those outside the majority (every rank when there is none)


class ReplicaWatch:
    """``on_step`` hook: after every step, the ranks compare their parameters' fingerprints."""

    def __init__(self, net: nn.Module):
        self.named = list(net.named_parameters())
        self.parted: Parted | None = None

    def __call__(self, step: int, loss: torch.Tensor, samples: int) -> None:
        mine = torch.stack([fingerprint(p) for _, p in self.named])
        every = mine.new_empty(dist.get_world_size() * len(mine))
        all_gather_single(every, mine)
        every = every.view(dist.get_world_size(), len(mine))
        differ = (every != every[0]).any(dim=0)
        if self.parted is None and bool(differ.any()):
            i = int(differ.nonzero()[0])
            self.parted = Parted(step, self.named[i][0], _outvoted(every[:, i].tolist()))


def _outvoted(prints: list[int]) -> list[int]:
    """The ranks whose fingerprint differs from the majority's; every rank if none has one."""
    most = max(set(prints), key=prints.count)
    if 2 * prints.count(most) <= len(prints):
        return list(range(len(prints)))
    return [r for r, p in enumerate(prints) if p != most]
