"""Data parallelism whose fp32 parameters are the same bits on any number of ranks.

Used in: chapter 11.

:class:`PieceStep` is chapter 1's step with the piece as the unit. Each of
this rank's pieces gets its own forward and backward pass, at one thread
(a piece's fp32 gradient differs between one thread and two); the gradients
are added along the tree of :mod:`companion.samebits.tree`, the ranks finish
the tree (:mod:`companion.samebits.exchange`), and every rank takes the same
optimizer step on the same bits. The run is chapter 5's loop
(:func:`~companion.ddp.loop.setup_rank`, chapter 3's ``train_epochs``) with
this step and :class:`~companion.samebits.tree.PieceLoader`.
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_choice, check_int
from ..core.files import atomic_write
from ..core.models import get_model
from ..core.precision import check_exact
from ..core.profiles import Profile, get_profile
from ..core.training import flat_params
from ..ddp.config import DDPConfig
from ..ddp.join import OPTIMIZERS
from ..ddp.loop import setup_rank, sgd, wrap_ddp
from ..runtime.checkpoint import unwrap
from ..runtime.epochs import Rank, train_epochs
from ..runtime.group import check_group, rank_device
from ..study.methods import Method, per_process
from .exchange import finish_tree
from .fingerprint import Parted, ReplicaWatch
from .tree import PieceLoader, nodes_within, tree_sum

__all__ = ["one_thread", "Flip", "PieceStep", "SameBitsResult", "train_same_bits", "WAYS"]

WAYS = ("pieces", "DDP")  # this chapter's step, or chapter 5's DDP as it is
EXCHANGES = ("halving", "gather")


@contextlib.contextmanager
def one_thread():
    """Compute at one thread, then give the process its thread count back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Flip(NamedTuple):
    """A planted fault: one bit of one gradient element, on one rank, after the exchange."""

    step: int  # the global step (1, 2, ...)
    rank: int
    parameter: int  # its index among the trainable parameters
    element: int
    bit: int  # 0-30 in fp32 (31 is the sign's)


class PieceStep:
    """``step(net, X, y, loss_fn, optimizer)`` over the pieces of ``loader``'s layout."""

    def __init__(self, loader: PieceLoader, exchange: str = "halving", flip: Flip | None = None):
        self.loader, self.exchange, self.flip, self.steps = loader, exchange, flip, 0

    def __call__(self, net, X, y, loss_fn, optimizer) -> torch.Tensor:
        layout, piece = self.loader.layout, self.loader.piece
        lo, hi = layout.block
        params = [p for p in net.parameters() if p.requires_grad]
        losses = []

        def gradient(node):  # a piece's: its summed loss's gradient, and which were used
            if node[1] - node[0] > 1:
                return None  # add the node's children
            i = (node[0] - lo) * piece
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(net(X[i : i + piece]), y[i : i + piece]) * len(y[i : i + piece])
            loss.backward()
            losses.append(loss.detach())
            return _flat(params)

        with one_thread():
            mine = [tree_sum(n, gradient) for n in nodes_within(lo, hi, layout.pieces)]
            zero = params[0].new_zeros(sum(p.numel() for p in params) + len(params))
            total = finish_tree(mine, layout.pieces, zero, self.exchange)
            self.steps += 1
            _set_grads(params, total, layout.samples, self._flip_here())
            optimizer.step()
        return sum(losses, zero.new_zeros(())) / max(len(y), 1)

    def _flip_here(self) -> Flip | None:
        flip = self.flip
        here = flip is not None and flip.step == self.steps and flip.rank == dist.get_rank()
        return flip if here else None


def _flat(params: list[nn.Parameter]) -> torch.Tensor:
    """The gradients end to end, zeros for none, then a 1 for each parameter that has one."""
    grads = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
    used = [p.new_ones(1) if p.grad is not None else p.new_zeros(1) for p in params]
    return torch.cat(grads + used)


@torch.no_grad()
def _set_grads(params, total: torch.Tensor, samples: int, flip: Flip | None) -> None:
    """Each parameter's gradient: its slice of ``total`` over the samples (None if unused)."""
    start, used = 0, total[-len(params) :]
    for i, p in enumerate(params):
        grad = total[start : start + p.numel()].view_as(p) / samples
        start += p.numel()
        p.grad = grad if used[i] > 0 else None
        if flip is not None and flip.parameter == i:
            ints = grad.view(-1).view(torch.int32 if grad.element_size() == 4 else torch.int64)
            ints[flip.element] ^= 1 << flip.bit


class SameBitsResult(NamedTuple):
    """What :func:`train_same_bits` returns on each rank."""

    records: list  # one Record per epoch on rank 0; [] on the other ranks
    params: torch.Tensor  # the final parameters, flattened, on the CPU
    trace: list[torch.Tensor]  # the parameters after each step, if asked for
    parted: Parted | None  # the first step at which the replicas differed, if watched
    steps: int  # global steps taken, over all runs of a resumed training


def train_same_bits(
    data,
    profile: Profile | str | None = None,
    way: str = "pieces",
    *,
    optimizer: str | None = None,
    piece: int = 8,
    exchange: str = "halving",
    threads: int | None = None,
    trace: bool = False,
    watch: bool = False,
    flip: Flip | None = None,
    save: str | None = None,
    resume: str | None = None,
    **options: Any,
) -> SameBitsResult:
    """Train with ``way`` through chapter 5's loop; every rank of a group calls it.

    ``options`` are fields of :class:`~companion.ddp.config.DDPConfig`;
    ``optimizer`` a name of chapter 5's ``OPTIMIZERS`` (``None``: the loop's
    SGD at ``lr``); ``threads`` sets the process's thread count first (the
    pieces' step computes at one thread whatever it is); ``trace`` keeps the
    parameters after every step, ``watch`` compares the replicas'
    fingerprints after every step; ``save`` writes a checkpoint at the end,
    ``resume`` starts from one, on any number of ranks.
    """
    _check_same_bits(way, optimizer, piece, exchange, threads, flip, resume)
    if threads is not None:
        torch.set_num_threads(threads)
    cfg = DDPConfig(get_profile(profile).name, **options).resolve(check_group("same bits")[1])
    run, step = _setup(data, cfg, way, optimizer, piece, exchange, flip)
    first_epoch = _resume(run, step, resume) if resume else 0
    hooks = [h for h in (_Trace(run.net) if trace else None, _watch(run, watch)) if h]
    records = train_epochs(run, on_step=lambda *a: [h(*a) for h in hooks], first_epoch=first_epoch)
    if save is not None and dist.get_rank() == 0:
        _save(save, run)
    traced = hooks[0].params if trace else []
    parted = next((h.parted for h in hooks if isinstance(h, ReplicaWatch)), None)
    return SameBitsResult(records, flat_params(run.net), traced, parted, run.steps)


def _setup(data, cfg: DDPConfig, way, optimizer, piece, exchange, flip) -> tuple[Rank, Any]:
    make = partial(_optimizer, optimizer)
    if way == "DDP":
        return setup_rank(data, cfg, "DDP", wrap_ddp, make_optimizer=make), None
    _check_fp(cfg.precision)
    _check_no_batchnorm(cfg.model)
    loader = PieceLoader(data.train, cfg.global_batch, piece, rank_device(), cfg.seed)
    step = PieceStep(loader, exchange, flip)
    run = setup_rank(data, cfg, "same bits", lambda net: net, make, make_step=lambda mode: step)
    run.train_iter = run.sampler = loader  # the global batch's pieces, not a rank's share
    return run, step


def _optimizer(name: str | None, params, lr: float) -> torch.optim.Optimizer:
    if name is None:
        return sgd(params, lr)
    cls, options = OPTIMIZERS[name]
    return cls([p for p in params if p.requires_grad], **options)


class _Trace:
    def __init__(self, net: nn.Module):
        self.net, self.params = net, []

    def __call__(self, step: int, loss, samples: int) -> None:
        self.params.append(flat_params(unwrap(self.net)))


def _watch(run: Rank, watch: bool) -> ReplicaWatch | None:
    return ReplicaWatch(unwrap(run.net)) if watch else None


def _save(path: str, run: Rank) -> Path:
    state = {
        "model": unwrap(run.net).state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "steps": run.steps,
    }
    return atomic_write(path, lambda f: torch.save(state, f))


def _resume(run: Rank, step: PieceStep, path: str) -> int:
    """Load ``path`` into this rank; returns the epoch to go on with, its first batches
    skipped so that the data order goes on where it stopped."""
    state = torch.load(path, map_location=run.device, weights_only=True)
    unwrap(run.net).load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.steps = step.steps = state["steps"]
    epoch, done = divmod(run.steps, len(run.train_iter))
    run.train_iter.set_epoch(epoch)
    run.train_iter.skip = done
    return epoch


def _check_fp(precision: str) -> None:
    check_exact(precision, "the pieces' step (bits are compared in fp32; fp64 for checks)")


def _check_no_batchnorm(model: str) -> None:
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in get_model(model).modules()):
        raise ValueError(
            f"model {model!r} has BatchNorm, whose running statistics each rank would update "
            f"from its own pieces only: train a model without it (model='lenet')"
        )


def _check_same_bits(way, optimizer, piece, exchange, threads, flip, resume) -> None:
    check_choice(way, "way", WAYS)
    if resume is not None and way != "pieces":
        raise ValueError("resume= needs way='pieces': DDP's shares change with the rank count")
    if resume is not None and not Path(resume).is_file():
        raise FileNotFoundError(f"no checkpoint at {resume!r}: pass the path save= wrote")
    if optimizer is not None:
        check_choice(optimizer, "optimizer", OPTIMIZERS)
    check_int(piece, "piece", 1, "samples per piece, e.g. 8")
    check_choice(exchange, "exchange", EXCHANGES)
    if threads is not None:
        check_int(threads, "threads", 1, "CPU threads of this process, or None")
    if flip is not None and not isinstance(flip, Flip):
        raise TypeError(f"flip must be a Flip(step, rank, parameter, element, bit), got {flip!r}")


def same_bits_worker(rank: int, world_size: int, data, profile=None, **options) -> SameBitsResult:
    """:func:`train_same_bits` as a worker of :func:`~companion.runtime.launcher.launch`."""
    return train_same_bits(data, profile, **options)


# Chapter 7's study cannot import this chapter (it comes first): this chapter hands it its
# method, and `python -m companion.study` joins the tables (companion.commands).
STUDY_METHODS: dict[str, Method] = {
    "samebits": per_process(
        same_bits_worker,
        11,
        "the pieces' step: the same fp32 bits on every device count (fp32 and a model "
        "without BatchNorm only; SGD at the study's lr)",
    ),
}
