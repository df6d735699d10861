"""Streaming DiLoCo by hand: fragments that meet in turn, late, and in few bits.

Used in: chapter 10.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) changes three
things in a DiLoCo meeting, each aimed at the *peak* bandwidth:

* **fragments**: the parameters, flattened, are cut into ``fragments``
  equal ranges (the paper cuts a transformer by blocks); each range still
  meets every ``period`` steps, but the ranges take turns (range ``p`` at
  steps ``(p + 1) period / F`` modulo ``period``), so a meeting sends
  ``1/F`` of the model;
* **overlap**: a group's exchange starts at its meeting and is waited for
  ``delay`` inner steps later, which run meanwhile (the all-reduce is
  posted with ``async_op=True``); its outer step then lands on replicas that
  moved on, and ``mix`` blends them: ``w = mix * w0 + (1 - mix) * w``
  (1: the replicas take ``w0``, as in DiLoCo);
* **few bits**: with ``bits`` (8 or 4) each rank sends its pseudo-gradient
  quantised, with one scale, and keeps the rounding error for the next
  meeting (error feedback). Summing integers of a few bits would overflow,
  so the quantised values are all-gathered and each rank sums them in
  float32 (INTELLECT-1 wrote an int8 all-reduce for this): an all-gather
  sends ``(N - 1)`` copies where a ring all-reduce sends ``2 (N - 1) / N``.

With one fragment, no delay, ``mix=1`` and no quantisation it is
:class:`~companion.slowlinks.averaging.DiLoCo` (tested bit for bit).
``state_dict()`` holds everything the next steps read, an exchange still in
flight and the rounding errors kept for later included, so a run resumed
from it at any step of the schedule equals the run never stopped, bit for bit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..core.checks import check_int
from .averaging import DiLoCo

__all__ = ["StreamingDiLoCo", "quantise", "dequantise"]


def _check_bits(bits) -> None:
    if bits not in (4, 8):
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")


def quantise(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as signed integers of ``bits`` (8, or 4 packed two to a byte) and one scale."""
    _check_bits(bits)
    top = 2 ** (bits - 1) - 1
    scale = (x.abs().max() / top).clamp_min(torch.finfo(torch.float32).tiny).float()
    q = torch.round(x / scale).clamp_(-top, top).to(torch.int8)
    if bits == 4:  # two values per byte: [-7, 7] -> [1, 15] in each half
        q = torch.cat([q, q.new_zeros(len(q) % 2)]) + 8
        q = (q[0::2] | (q[1::2] << 4)).to(torch.uint8)
    return q, scale.reshape(1)


def dequantise(q: torch.Tensor, scale: torch.Tensor, bits: int, numel: int) -> torch.Tensor:
    """The float32 values :func:`quantise` encoded (``numel`` of them)."""
    _check_bits(bits)
    if bits == 4:
        q = torch.stack([(q & 15).to(torch.int8) - 8, (q >> 4).to(torch.int8) - 8], 1).reshape(-1)
    return q[:numel].float() * scale


class StreamingDiLoCo(DiLoCo):
    """DiLoCo whose ``fragments`` meet in turn, ``delay`` steps late, in ``bits`` bits."""

    def __init__(
        self,
        inner,
        period: int,
        fragments: int = 2,
        delay: int = 0,
        mix: float = 1.0,
        bits: int | None = None,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
    ):
        super().__init__(inner, period, outer_lr, outer_momentum)
        self.fragments = check_int(fragments, "fragments", 1, "the ranges that take turns: 1, 2, 4")
        total = sum(p.numel() for p in self.params())
        if self.fragments > total:
            raise ValueError(
                f"fragments must be at most the {total} trainable numbers, got {fragments}"
            )
        self.delay = check_int(delay, "delay", 0, "the inner steps an exchange may take")
        if not self.delay < period // self.fragments or not 0 < mix <= 1:
            raise ValueError(
                f"need 0 <= delay < period / fragments and 0 < mix <= 1, got delay "
                f"{delay}, period {period}, fragments {fragments}, mix {mix}"
            )
        if bits is not None:
            _check_bits(bits)  # None: float32
        self.mix, self.bits, self.pending = mix, bits, {}
        self.bounds = [
            (p * total // fragments, (p + 1) * total // fragments) for p in range(fragments)
        ]
        flat = self._flat()  # w0, one range per fragment, each with the outer optimizer's state
        self.start = [flat[a:b].clone().requires_grad_() for a, b in self.bounds]
        self.outer = torch.optim.SGD(
            self.start, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0
        )
        self.leftover = [None] * fragments  # each range's quantisation error, sent later

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params()])

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.inner.step(closure)
        self.steps += 1
        for p in range(self.fragments):
            if self.steps % self.period == (p + 1) * self.period // self.fragments % self.period:
                self.pending[p] = (self.steps + self.delay, self._send(p))
        for p, (due, finish) in list(self.pending.items()):
            if due == self.steps:
                del self.pending[p]
                self._land(p, finish())
        return loss

    def _send(self, p: int):
        """Post range ``p``'s exchange; a function that waits for it and returns the mean."""
        (a, b), n = self.bounds[p], dist.get_world_size()
        delta = self.start[p].detach() - self._flat()[a:b]
        if self.bits is None:
            work = dist.all_reduce(delta, async_op=True)
            return lambda: (work.wait(), delta / n)[1]
        if self.leftover[p] is not None:
            delta += self.leftover[p]  # what earlier meetings rounded away
        q, scale = quantise(delta, self.bits)
        self.leftover[p] = delta - dequantise(q, scale, self.bits, len(delta))
        qs = [torch.empty_like(q) for _ in range(n)]
        scales = [torch.empty_like(scale) for _ in range(n)]
        works = [
            dist.all_gather(qs, q, async_op=True),
            dist.all_gather(scales, scale, async_op=True),
        ]

        def finish():
            for work in works:
                work.wait()
            total = sum(dequantise(q_, s_, self.bits, len(delta)) for q_, s_ in zip(qs, scales))
            return (total / n).to(delta.dtype)

        return finish

    def _land(self, p: int, mean: torch.Tensor) -> None:
        """The outer step on range ``p`` (the others have no gradient: untouched), then the mix."""
        (a, b), params = self.bounds[p], self.params()
        for w0 in self.start:
            w0.grad = None
        self.start[p].grad = mean
        self.outer.step()
        flat = self._flat()
        flat[a:b].mul_(1 - self.mix).add_(self.start[p].detach(), alpha=self.mix)
        for param, piece in zip(params, flat.split([q.numel() for q in params])):
            param.copy_(piece.view_as(param))

    @torch.no_grad()
    def state_dict(self) -> dict:
        """DiLoCo's state and what the next steps read besides: each exchange still in
        flight (waited for here, so its mean is saved with the step it lands at; the run
        goes on with that same mean) and each range's quantisation error."""
        pending = {}
        for p, (due, finish) in list(self.pending.items()):
            mean = finish()
            self.pending[p] = (due, _arrived(mean))  # waited for once
            pending[p] = (due, mean.clone())
        leftover = [None if e is None else e.clone() for e in self.leftover]
        schedule = self._schedule()
        return {**super().state_dict(), "pending": pending, "leftover": leftover, **schedule}

    def _schedule(self) -> dict:
        return {"period": self.period, "fragments": self.fragments, "delay": self.delay,
                "bits": self.bits}  # fmt: skip

    def load_state_dict(self, state_dict: dict) -> None:
        saved = {key: state_dict.get(key, "absent") for key in self._schedule()}
        if saved != self._schedule():
            raise ValueError(
                f"StreamingDiLoCo.load_state_dict: the state was saved with {saved}, this "
                f"optimizer runs {self._schedule()}: build it with the settings it was saved "
                f"with (a DiLoCo state has none of them)"
            )
        super().load_state_dict(state_dict)
        self.pending = {
            int(p): (due, _arrived(mean.clone()))
            for p, (due, mean) in state_dict["pending"].items()
        }
        self.leftover = [None if e is None else e.clone() for e in state_dict["leftover"]]


def _arrived(mean: torch.Tensor):
    """An exchange already waited for: its finish returns the mean."""
    return lambda: mean
