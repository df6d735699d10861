"""Data parallelism whose fp32 parameters are the same bits on any number of ranks.

Used in: chapter 11.

:func:`train_same_bits` is chapter 5's loop
(:func:`~companion.ddp.loop.setup_rank`, chapter 3's ``train_epochs``) with
:class:`~companion.samebits.step.PieceStep` as its step and
:class:`~companion.samebits.tree.PieceLoader` as its data, or (``way="DDP"``)
chapter 5's DDP as it is, for comparison. The global batch, not a rank's share,
is what the options set: the run is the same on every rank count.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_choice, check_int
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
from .fingerprint import Parted, ReplicaWatch
from .resume import resume_same_bits, save_same_bits
from .step import Flip, PieceStep
from .tree import PieceLoader

__all__ = ["SameBitsResult", "train_same_bits", "same_bits_worker", "WAYS"]

WAYS = ("pieces", "DDP")  # this chapter's step, or chapter 5's DDP as it is
EXCHANGES = ("halving", "gather")


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

    ``options`` are fields of :class:`~companion.ddp.config.DDPConfig` (the
    global batch, not ``per_rank_batch`` or ``scale_lr``: those change with the
    rank count; precision fp32 unless given); ``optimizer`` a name of chapter
    5's ``OPTIMIZERS`` (``None``: the loop's SGD at ``lr``); ``threads`` sets
    the process's thread count first (the pieces' step computes at one thread
    whatever it is); ``trace`` keeps the parameters after every step,
    ``watch`` compares the replicas' fingerprints after every step; ``save``
    writes a checkpoint at the end, ``resume`` starts from one, on any number of
    ranks (``epochs`` and ``max_steps`` count from the start of the run).
    """
    _check_same_bits(way, optimizer, piece, exchange, threads, flip, resume, options)
    if threads is not None:
        torch.set_num_threads(threads)
    world_size = check_group("same bits")[1]
    cfg = DDPConfig(get_profile(profile).name, **{"precision": "fp32", **options})
    cfg = cfg.resolve(1 if way == "pieces" else world_size)  # the global batch, whole
    run, step = _setup(data, cfg, way, optimizer, piece, exchange, flip)
    first_epoch = resume_same_bits(resume, run, step, optimizer, cfg.seed) if resume else 0
    hooks = [h for h in (_Trace(run.net) if trace else None, _watch(run, watch)) if h]
    records = train_epochs(run, on_step=lambda *a: [h(*a) for h in hooks], first_epoch=first_epoch)
    if save is not None and dist.get_rank() == 0:
        save_same_bits(save, run, step, optimizer, cfg.seed)
    traced = hooks[0].params if trace else []
    parted = next((h.parted for h in hooks if isinstance(h, ReplicaWatch)), None)
    return SameBitsResult(records, flat_params(run.net), traced, parted, run.steps)


def _setup(data, cfg: DDPConfig, way, optimizer, piece, exchange, flip) -> tuple[Rank, Any]:
    make = partial(_optimizer, optimizer)
    if way == "DDP":
        return setup_rank(data, cfg, "DDP", wrap_ddp, make_optimizer=make), None
    _check_pieces(cfg, flip)
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


def _check_pieces(cfg: DDPConfig, flip: Flip | None) -> None:
    check_exact(cfg.precision, "the pieces' step (bits are compared in fp32; fp64 for checks)")
    if rank_device().type != "cpu":
        raise ValueError(
            "the pieces' step is checked on CPU processes only: launch it with backend='gloo' "
            "(on a GPU the same bits would need deterministic kernels, and fp32 results "
            "TF32 off: chapter 11, exercise 5)"
        )
    net = get_model(cfg.model)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()):
        raise ValueError(
            f"model {cfg.model!r} has BatchNorm, which normalises each piece by its own "
            f"statistics and whose running statistics each rank would update from its own "
            f"pieces only: train a model without it (model='lenet')"
        )
    sizes = [p.numel() for p in net.parameters() if p.requires_grad]
    if flip is not None and not (
        0 <= flip.parameter < len(sizes) and 0 <= flip.element < sizes[flip.parameter]
    ):
        raise ValueError(f"{flip} is outside {cfg.model}'s trainable parameters {sizes}")
    if flip is not None and not 0 <= flip.bit < 8 * (8 if cfg.precision == "fp64" else 4):
        raise ValueError(f"{flip}: bit must be 0-31 in fp32, 0-63 in fp64")


def _check_same_bits(way, optimizer, piece, exchange, threads, flip, resume, options) -> None:
    check_choice(way, "way", WAYS)
    if way != "pieces" and (resume is not None or flip is not None):
        raise ValueError("resume= and flip= need way='pieces' (chapter 5's DDP takes neither)")
    if way == "pieces" and (options.get("per_rank_batch") or options.get("scale_lr")):
        raise ValueError(
            "per_rank_batch and scale_lr change the run with the rank count: give global_batch "
            "and lr, the same on every rank count"
        )
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
