"""Are the hand-written all-reduces right? A worker that checks them against torch's.

Used in: chapter 3 (the tests run it at every world size).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..runtime.group import rank_device
from .allreduce import ALLREDUCES, HAND_WRITTEN, allreduce_torch

__all__ = ["check_allreduce"]


def check_allreduce(
    rank: int,
    world_size: int,
    numels=(1, 7, 1_000_003),
    dtypes=(torch.float32, torch.float64),
    seed: int = 0,
    algorithms: dict[str, Callable] | None = None,
) -> list[tuple]:
    """Worker: each hand-written all-reduce against ``dist.all_reduce``; raises if off.

    For each size and dtype, two inputs that differ on every rank: random
    normal values (compared with ``assert_close``: the order of additions
    differs between algorithms) and small integers stored as floats (sums
    are exact, so the results must be *equal*; a chunk lost or counted twice
    cannot hide). ``algorithms`` defaults to :data:`HAND_WRITTEN`. Returns
    rows ``(algorithm, numel, dtype, max |difference|)`` for the random inputs.
    """
    algorithms = algorithms or {name: ALLREDUCES[name] for name in HAND_WRITTEN}
    rows, g = [], torch.Generator().manual_seed(seed + 1000 * rank)
    device = rank_device()  # the local rank's GPU under nccl (multi-node safe), else the CPU
    for numel in numels:
        for dtype in dtypes:
            noise = torch.randn(numel, generator=g, dtype=dtype).to(device)
            integers = torch.randint(-1000, 1000, (numel,), generator=g)
            integers = integers.to(device, dtype)
            want_noise = allreduce_torch(noise.clone())
            want_integers = allreduce_torch(integers.clone())
            for name, allreduce in algorithms.items():
                case = f"{name}, {numel} x {dtype}"
                got = allreduce(noise.clone())
                torch.testing.assert_close(got, want_noise, msg=lambda m: f"{case}: {m}")
                if not torch.equal(allreduce(integers.clone()), want_integers):
                    raise AssertionError(f"{case}: integer sums differ from dist.all_reduce")
                diff = float((got - want_noise).abs().max()) if numel else 0.0
                rows.append((name, numel, str(dtype).replace("torch.", ""), diff))
    return rows
