"""One step of each method, measured: bytes sent (the ledger), memory held, seconds.

Used in: chapter 9 (and ``python -m companion_tools.bench sharding``, whose worker calls
:func:`time_worker` and :func:`state_worker`).

:func:`state_worker` runs every method of ``methods`` on the same model
and batch: a first step (the optimizer state comes into being, lazy
initialisation is done), then a second step inside
:func:`~.ledger.count_bytes`, with :func:`~.memory.measure_state` taken
within and after it. It returns, per method,
the collectives of that step, the state after it and its *peak*: the
largest state sampled as each layer starts and ends its forward, after each
gradient's accumulation, and as each collective is called, with that call's own
buffers (the gathered output, the gradient being reduce-scattered or all-reduced)
counted where they are not parameters, gradients or optimizer state. Temporary
tensors that no collective touches (activations, an optimizer's scratch) are not seen.
:func:`divisible_mlp` is a model whose every layer, and their sum, has a size divisible
by 1, 2, 3 and 4, so formulas hold exactly.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from ..core.devices import synchronize
from ..core.noise import rotated
from ..core.precision import MathMode
from ..core.training import set_seed
from ..runtime.group import rank_device
from .ledger import Ledger, count_bytes
from .memory import measure_state, saved_weight_bytes
from .training import METHODS, shard
from .zero3 import Zero3

__all__ = [
    "divisible_mlp",
    "state_worker",
    "saved_weights_worker",
    "time_worker",
]


def divisible_mlp(width: int = 24, depth: int = 3) -> nn.Sequential:
    """Linear layers 784 -> width -> ... -> 12 classes; ``width`` a multiple of 12."""
    if width % 12:
        raise ValueError(f"width must be a multiple of 12 (sizes divide by 1-4), got {width}")
    sizes = [28 * 28] + [width] * depth + [12]
    layers = [nn.Flatten()]
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _batch(batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(dist.get_rank())
    X = torch.randn(batch, 1, 28, 28, generator=g)
    return X.to(device), torch.randint(0, 12, (batch,), generator=g).to(device)


def state_worker(
    rank: int,
    world_size: int,
    methods=METHODS,
    width: int = 24,
    depth: int = 3,
    precision: str = "fp32",
    batch: int = 8,
) -> dict[str, dict[str, Any]]:
    """Worker: ``{method: {"calls", "state", "peak", "psi", "tensors"}}`` of one measured step
    (``tensors``: the trainable parameter tensors)."""
    device = rank_device()
    mode = MathMode(precision, device)
    X, y = _batch(batch, device)
    out = {}
    for method in methods:
        set_seed(0)
        net = divisible_mlp(width, depth).to(device)
        psi = sum(p.numel() for p in net.parameters())
        model, opt = shard(method, net, mode=mode, lr=1e-3)
        for _ in range(2):  # the first step warms up; the second is measured
            samples: list[int] = []

            def sample(buffers=()) -> None:  # the state now, plus a collective's buffers
                samples.append(measure_state(model, opt, buffers)["total"])

            hooks = _sample_during_step(net, sample)
            with count_bytes(Ledger(world_size, watch=sample)) as ledger:
                with mode.autocast():
                    loss = F.cross_entropy(model(X), y)
                loss.backward()
                opt.step()
            state = measure_state(model, opt)
            for hook in hooks:
                hook.remove()
            opt.zero_grad()
        peak = max(samples + [state["total"]])
        tensors = sum(1 for p in net.parameters() if p.requires_grad)
        out[method] = {
            "calls": ledger.calls,
            "state": state,
            "peak": peak,
            "psi": psi,
            "tensors": tensors,
        }
    return out


def saved_weights_worker(
    rank: int, world_size: int, width: int = 96, depth: int = 4, batch: int = 8
) -> dict[str, int]:
    """Worker: bytes of weights autograd still holds after one bf16 forward
    (:func:`~.memory.saved_weight_bytes`), for ZeRO-3 under autocast alone, ZeRO-3 casting
    at gather (``param_dtype``) and FSDP2 with its policy, each under autocast."""
    device = rank_device()
    mode = MathMode("bf16", device)
    X, _ = _batch(batch, device)
    out = {}
    for label in ("ZeRO-3, autocast only", "ZeRO-3, cast at gather", "FSDP2, cast at gather"):
        set_seed(0)
        net = divisible_mlp(width, depth).to(device)
        if label == "ZeRO-3, autocast only":
            model, _ = net, Zero3(net, torch.optim.Adam, lr=1e-3)
        else:
            model, _ = shard(label.split(",")[0], net, mode=mode, lr=1e-3)
        out[label] = saved_weight_bytes(model, X, mode.autocast())
    return out


def _sample_during_step(net: nn.Module, sample) -> list:
    """Hooks that call ``sample()`` as each layer starts and ends its forward and after each
    gradient's accumulation (the state then includes gathered units and gradients in flight;
    registered after a stage's own hooks, they run after them)."""
    leaves = [m for m in net.modules() if not list(m.children())]
    hooks = [m.register_forward_pre_hook(lambda *_: sample()) for m in leaves]
    hooks += [m.register_forward_hook(lambda *_: sample()) for m in leaves]
    hooks += [
        p.register_post_accumulate_grad_hook(lambda _: sample())
        for p in net.parameters()
        if p.requires_grad
    ]
    return hooks


def time_worker(
    rank: int,
    world_size: int,
    methods=("ZeRO-3", "FSDP2"),
    width: int = 96,
    depth: int = 4,
    batch: int = 32,
    steps: int = 10,
    rounds: int = 3,
) -> dict[str, list[float]]:
    """Worker: ``{method: each round's median seconds per step}``, the methods taking turns
    (who goes first rotates), two untimed steps before each turn.

    A step's time is the slowest rank's (one all-reduce of the times at the end).
    """
    device = rank_device()
    X, y = _batch(batch, device)
    runs = {}
    for method in methods:
        set_seed(0)
        runs[method] = shard(method, divisible_mlp(width, depth).to(device), lr=1e-3)
    times = torch.zeros(rounds, steps, len(methods), dtype=torch.float64)
    for r in range(rounds):
        for j, (model, opt) in rotated(list(enumerate(runs.values())), r):
            for i in range(-2, steps):  # two untimed steps each turn
                dist.barrier()
                synchronize(device)
                start = time.perf_counter()
                F.cross_entropy(model(X), y).backward()
                opt.step()
                opt.zero_grad()
                synchronize(device)
                if i >= 0:
                    times[r, i, j] = time.perf_counter() - start
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    per_round = times.cpu().median(dim=1).values  # [rounds, methods]
    return {method: per_round[:, j].tolist() for j, method in enumerate(methods)}
