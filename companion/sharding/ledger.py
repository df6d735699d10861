"""A ledger of every collective: how many bytes each rank sends, per kind, per step.

Used in: chapters 9 and 10.

:func:`count_bytes` replaces, for the duration of a ``with`` block, the
collectives of ``torch.distributed`` that the chapter's code, FSDP2 and
DDP's Python communication hook call, with counting versions that then
call the real one. Each call is written down with the size of the *whole*
tensor (the all-reduced buffer, the gathered output, the reduce-scattered
input). :func:`ring_cost` turns one entry into what a ring sends per rank,
in chapter 3's terms (messages, bytes):

* all-reduce of ``B`` bytes: ``2 (N - 1)`` messages, ``2 (N - 1) / N * B`` bytes;
* reduce-scatter or all-gather: ``N - 1`` messages, ``(N - 1) / N * B`` bytes
  (each is one half of the ring all-reduce);
* broadcast: ``B`` bytes from the root (counted on every rank as an upper bound);
* a point-to-point send (``send``, or an ``isend`` posted by
  ``batch_isend_irecv``: chapter 3's hand-written all-reduces, chapter 10's
  DiLoCo on them): one message of ``B`` bytes.

So per step with ``psi`` parameters of ``b`` bytes: DDP ``2 (N-1)/N * b psi``;
ZeRO-1 and ZeRO-2 the same (reduce-scatter + all-gather); ZeRO-3 one more
all-gather, ``1.5`` times as much (:func:`expected_bytes`). The hand-written
stages add one all-reduce of a 4-byte flag per parameter tensor (which
parameters got a gradient on some rank), a few hundred bytes at most.
:meth:`Ledger.seconds` prices the ledger with a fitted ``(alpha, beta)``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..core.checks import check_choice, check_int

__all__ = ["Ledger", "count_bytes", "ring_cost", "expected_bytes"]

# torch.distributed function: (kind, the argument that is the whole tensor). torch
# 2.13 added the *_single names; older torch has only the *_tensor ones
# (companion.core.compat calls whichever the installed torch has).
KINDS = {
    "all_reduce": ("all-reduce", "tensor"),
    "reduce_scatter_single": ("reduce-scatter", "input"),
    "reduce_scatter_tensor": ("reduce-scatter", "input"),
    "all_gather_single": ("all-gather", "output_tensor"),
    "all_gather_into_tensor": ("all-gather", "output_tensor"),
    "broadcast": ("broadcast", "tensor"),
    "all_gather": ("all-gather", "tensor_list"),  # the list form: the outputs, together
    "send": ("send", "tensor"),  # point to point (chapter 3's all-reduces): what leaves
}
# Chapter 3's sendrecv posts isend/irecv pairs through batch_isend_irecv, whose P2POp accepts
# only torch's own isend: those are counted there, one "send" per isend of the batch.


def _check_ring(kind: str, world_size: int) -> int:
    check_choice(kind, "kind", sorted({k for k, _ in KINDS.values()}))
    return check_int(world_size, "world_size")


def ring_cost(kind: str, nbytes: int, world_size: int) -> tuple[float, float]:
    """``(messages, bytes)`` one rank sends for a collective over ``nbytes`` in a ring."""
    n = _check_ring(kind, world_size)
    if n == 1:
        return 0.0, 0.0
    if kind == "all-reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes
    if kind == "broadcast":
        return float(n - 1), float(nbytes)
    if kind == "send":
        return 1.0, float(nbytes)
    return float(n - 1), (n - 1) / n * nbytes


@dataclass
class Ledger:
    """The collectives called in a block: ``(kind, bytes of the whole tensor)`` each, and
    in ``dtypes`` the element type each one moved (``"bfloat16"``, ...), call for call.

    ``watch``, if set, is called with every tensor of each call (inputs and outputs)
    before the call runs: chapter 9's peak counts them (:mod:`companion.sharding.measure`)."""

    world_size: int
    calls: list[tuple[str, int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    watch: Callable[[list[torch.Tensor]], None] | None = field(default=None, repr=False)

    def _add(self, kind: str, tensors) -> None:
        self.calls.append((kind, sum(t.numel() * t.element_size() for t in tensors)))
        self.dtypes.append(str(tensors[0].dtype).removeprefix("torch.") if tensors else "")

    def dtypes_by_kind(self) -> dict[str, list[str]]:
        """``{kind: the element types its calls moved}`` (e.g. reduce-scatters in bf16)."""
        out: dict[str, set[str]] = {}
        for (kind, _), dtype in zip(self.calls, self.dtypes):
            out.setdefault(kind, set()).add(dtype)
        return {kind: sorted(types) for kind, types in out.items()}

    def sent(self, kind: str | None = None) -> float:
        """Bytes this rank sends, over every call (or only those of ``kind``)."""
        return sum(ring_cost(k, b, self.world_size)[1] for k, b in self.calls if kind in (None, k))

    def counts(self) -> dict[str, int]:
        return dict(Counter(k for k, _ in self.calls))

    def seconds(self, alpha: float, beta: float) -> float:
        """Chapter 3's model over the ledger: ``sum(messages * alpha + bytes * beta)``."""
        total = 0.0
        for kind, nbytes in self.calls:
            messages, sent = ring_cost(kind, nbytes, self.world_size)
            total += messages * alpha + sent * beta
        return total


def _counting(name: str, real, ledger: Ledger):
    kind, argument = KINDS[name]
    signature = inspect.signature(real)

    def counted(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        value = bound[argument]
        ledger._add(kind, list(value) if isinstance(value, (list, tuple)) else [value])
        if ledger.watch is not None:
            ledger.watch(_tensors(bound.values()))
        return real(*args, **kwargs)

    return counted


def _tensors(values) -> list[torch.Tensor]:
    flat = [v for x in values for v in (x if isinstance(x, (list, tuple)) else [x])]
    return [t for t in flat if torch.is_tensor(t)]


@contextlib.contextmanager
def count_bytes(ledger: Ledger | None = None) -> Iterator[Ledger]:
    """Inside: every collective of :data:`KINDS` that this torch has goes into the yielded
    ledger (a new one, or ``ledger``, which then goes on adding up)."""
    ledger = Ledger(dist.get_world_size()) if ledger is None else ledger
    saved = {name: getattr(dist, name) for name in KINDS if hasattr(dist, name)}
    for name, real in saved.items():
        setattr(dist, name, _counting(name, real, ledger))
    saved["batch_isend_irecv"] = batch = dist.batch_isend_irecv

    def counted_batch(p2p_op_list):
        for op in p2p_op_list:
            if op.op is dist.isend:
                ledger._add("send", [op.tensor])
        return batch(p2p_op_list)

    dist.batch_isend_irecv = counted_batch
    try:
        yield ledger
    finally:
        for name, real in saved.items():
            setattr(dist, name, real)


def expected_bytes(method: str, param_bytes: int, world_size: int, tensors: int = 0) -> float:
    """What one step of ``method`` sends per rank, by the formulas above.

    ``tensors``: the parameter tensors of the hand-written stages, whose flags
    (one ``float32`` each) they all-reduce; 0 for DDP and torch's FSDP2.
    """
    n = check_int(world_size, "world_size")
    check_int(tensors, "tensors", 0)
    ring = (n - 1) / n * param_bytes  # one half of an all-reduce
    halves = {"DDP": 2, "ZeRO-1": 2, "ZeRO-2": 2, "ZeRO-3": 3}
    check_choice(method, "method", list(halves))
    return halves[method] * ring + 2 * (n - 1) / n * 4 * tensors
