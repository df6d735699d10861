"""Honest timing: a wall clock read after the device has finished, and whether it was busy.

Used in: chapter 1 (every trainer and bench times with it).
"""

from __future__ import annotations

import time

import torch

from .devices import as_devices, synchronize
from .noise import cpu_share, scheduler_times

__all__ = ["Timer"]


class Timer:
    """A wall-clock timer that synchronises ``device`` (``None``: the current GPU, if there
    is one) before reading the clock.

    Use as a context manager; the elapsed seconds end up in ``.seconds``::

        with Timer(device) as t:
            train_epoch(...)
        t.seconds

    ``share=True`` (an epoch's timer): on a CPU, ``.cpu_share`` is also the share of the
    time its threads were ready to run that they got a core (:func:`~.noise.cpu_share`):
    about 1 on a quiet machine, lower when other work held the cores and inflated the
    seconds; else ``None``. Reading the counters takes tens of microseconds a time.
    """

    def __init__(self, device: torch.device | str | None = None, share: bool = False):
        self.device = device if device is None else as_devices([device])[0]
        on_cpu = not torch.cuda.is_available() if device is None else self.device.type == "cpu"
        self.share, self.seconds, self.cpu_share = share and on_cpu, 0.0, None

    def __enter__(self) -> Timer:
        synchronize(self.device)
        self._times = scheduler_times() if self.share else None
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        if self._times is not None:
            self.cpu_share = cpu_share(self._times, scheduler_times())
