"""Activation checkpointing: keep each block's input, recompute the rest in backward.

Used in: chapter 9.

Sharding splits the model states N ways; the activations that autograd keeps for backward
are not states and stay whole on every rank, growing with the per-rank batch.
:class:`Recomputed` wraps a block in ``torch.utils.checkpoint``: its forward keeps only
the block's input, and backward runs the block's forward again to rebuild the rest before
it differentiates. Memory saved, time paid: :func:`recompute_cost` measures both on
:func:`expanding_mlp`, whose blocks widen 4x inside as a transformer's MLP does.
:func:`recompute_worker` shows that it composes with FSDP2 and changes no number.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from ..core.checks import check_int, check_module
from ..core.noise import LoadWatch, paired_ratio, rotated
from ..runtime.group import rank_device
from .library import fsdp2
from .memory import saved_bytes
from .training import full_parameters
from .verify import OPTIMIZERS, _model, _share_step

__all__ = ["Recomputed", "recompute", "expanding_mlp", "recompute_cost", "recompute_worker"]


class Recomputed(nn.Module):
    """``block``, whose activations are recomputed in backward instead of kept."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = check_module(block, "block")

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        # non-reentrant: saves the inputs, replays the forward (and its RNG) in backward
        return checkpoint(self.block, *inputs, use_reentrant=False)


def recompute(net: nn.Module) -> nn.Module:
    """Wrap, in place, each top-level child of ``net`` that holds parameters in
    :class:`Recomputed`; returns ``net``. Parameter names gain ``.block``."""
    check_module(net)
    wrapped = 0
    for name, child in net.named_children():
        if next(child.parameters(), None) is not None:
            setattr(net, name, Recomputed(child))
            wrapped += 1
    if not wrapped:
        raise ValueError("recompute: no child of the model holds parameters: nothing to wrap")
    return net


def expanding_mlp(width: int = 96, depth: int = 4) -> nn.Sequential:
    """784 -> ``width``, then ``depth`` blocks ``width -> 4 width -> width`` (ReLUs), -> 12."""
    check_int(width, "width")
    check_int(depth, "depth")
    blocks = [
        nn.Sequential(
            nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width), nn.ReLU()
        )
        for _ in range(depth)
    ]
    return nn.Sequential(
        nn.Flatten(), nn.Linear(28 * 28, width), nn.ReLU(), *blocks, nn.Linear(width, 12)
    )


def recompute_cost(batch: int, rounds: int = 5, width: int = 96, depth: int = 4) -> dict:
    """The same model with and without :func:`recompute` on one ``batch``: the bytes saved
    for backward (:func:`~.memory.saved_bytes`) and the time of a training step, the two
    sides taking turns in each round (``"time"``: recomputed / plain, a
    :class:`~companion.core.noise.Ratio`; ``"load"``: the :class:`~companion.core.noise.Load`, judged by this process's threads' share)."""
    check_int(batch, "batch")
    check_int(rounds, "rounds", 2, "a spread needs two rounds or more")
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 12, (batch,), generator=g)
    nets = {
        "plain": expanding_mlp(width, depth),
        "recomputed": recompute(expanding_mlp(width, depth)),
    }
    out = {side: saved_bytes(net, X) for side, net in nets.items()}
    seconds, watch = {side: [] for side in nets}, LoadWatch(own=1, in_process=True)
    for r in range(rounds + 1):  # round 0 warms both up
        for side in rotated(list(nets), r):
            start = time.perf_counter()
            F.cross_entropy(nets[side](X), y).backward()
            if r:
                seconds[side].append(time.perf_counter() - start)
            nets[side].zero_grad(set_to_none=True)
    out["time"], out["load"] = paired_ratio(seconds["recomputed"], seconds["plain"]), watch.done()
    return out


def recompute_worker(rank: int, world_size: int, batches) -> dict[str, torch.Tensor]:
    """Worker: FSDP2 over the chapter's model with every unit :class:`Recomputed` trains on
    the global ``batches`` (float64, each rank its share) with each optimizer of
    :data:`~.verify.OPTIMIZERS`; returns the whole parameters after the steps."""
    device, out = rank_device(), {}
    for name, (cls, hp) in OPTIMIZERS.items():
        net, opt = fsdp2(recompute(_model()).to(device), cls, **hp)
        for X, y in batches:
            _share_step(net, opt, X.to(device), y.to(device))
        out[name] = full_parameters(net, opt)
    return out
