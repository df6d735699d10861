"""What an all-reduce does, message by message: an opt-in record of its steps.

Used in: chapter 3 (its pictures come from these records).

:func:`~companion.collectives.allreduce.allreduce_naive`,
:func:`~companion.collectives.allreduce.allreduce_ring` and
:func:`~companion.collectives.allreduce.allreduce_recursive_doubling` take an
optional ``trace`` list. Left at ``None``, the default, they record nothing
(one ``is None`` test per step) and compute exactly what they compute
without it. Given a list, each rank appends one :class:`Step` for every step
it takes part in: what it sent and to whom, what it received and from whom
(as ranges of elements of the flattened tensor), and a copy of its whole
tensor afterwards. Step numbers are the algorithm's, so the two ends of a
message carry the same number, and a rank that sits a step out records
nothing for it. :func:`link_load` adds up what crossed each link.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch
import torch.distributed as dist

__all__ = ["Step", "note", "link_load"]


class Step(NamedTuple):
    """One rank's part in one step of an all-reduce."""

    step: int  # the algorithm's step, from 0; both ends of a message share it
    phase: str  # e.g. "reduce-scatter", "all-gather", "reduce", "broadcast", "swap"
    rank: int
    sent_to: int | None  # the rank this one sent to, or None
    sent: tuple[int, int] | None  # the elements sent: (start, stop) of the flat tensor
    received_from: int | None
    received: tuple[int, int] | None
    after: tuple[float, ...]  # this rank's whole tensor after the step


def note(
    trace: list,
    step: int,
    phase: str,
    flat: torch.Tensor,
    to: int | None = None,
    sent: tuple[int, int] | None = None,
    src: int | None = None,
    received: tuple[int, int] | None = None,
) -> None:
    """Append this rank's :class:`Step` to ``trace`` (called only when tracing)."""
    rank = dist.get_rank()
    trace.append(Step(step, phase, rank, to, sent, src, received, tuple(flat.tolist())))


def link_load(steps: Iterable[Step]) -> dict[tuple[int, int], int]:
    """Elements sent over each directed link ``(src, dst)``, from every rank's steps.

    Counted at the sender, so pass the steps of all ranks together.
    """
    load: dict[tuple[int, int], int] = {}
    for s in steps:
        if s.sent_to is not None and s.sent is not None:
            link = (s.rank, s.sent_to)
            load[link] = load.get(link, 0) + s.sent[1] - s.sent[0]
    return dict(sorted(load.items()))
