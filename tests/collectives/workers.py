"""Workers for the chapter-3 trace tests (importable by the launcher's fork server as
``tests.collectives.workers``)."""

import inspect

import torch

from companion.collectives import ALLREDUCES, TRACED


def traced_equals_untraced(rank: int, world_size: int, numels=(0, 1, 7, 1001)) -> list[tuple]:
    """Each traced all-reduce with and without a trace list, on the same random input:
    ``(algorithm, numel, results bit-identical, steps recorded, trace defaults to None)``."""
    g = torch.Generator().manual_seed(rank)
    rows = []
    for name in TRACED:
        allreduce = ALLREDUCES[name]
        default = inspect.signature(allreduce).parameters["trace"].default
        for numel in numels:
            x = torch.randn(numel, generator=g)
            plain = allreduce(x.clone())
            steps: list = []
            traced = allreduce(x.clone(), trace=steps)
            rows.append((name, numel, torch.equal(plain, traced), len(steps), default is None))
    return rows


def off_by_one_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """A wrong all-reduce (the ring's sum plus one), for check_allreduce to catch."""
    ALLREDUCES["ring"](tensor)
    tensor += 1
    return tensor


def mismatched_allreduce(rank: int, world_size: int, name: str) -> str:
    """Rank 1 passes one element more than the others (issue 42, item 10)."""
    ALLREDUCES[name](torch.ones(5 + (rank == 1)))
    return "returned"
