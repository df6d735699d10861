"""The command line of ``companion.ddp``: join torchrun's process group, parse, train.

Used in: chapter 5.

``torchrun --standalone --nproc-per-node=N -m companion.ddp [options]`` starts
``N`` processes on this machine, sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` in each, and each
runs :func:`main`: it checks the options, joins the group
(:func:`~companion.runtime.group.init_from_env`, the ``env://`` rendezvous)
and calls :func:`companion.ddp.training.train_ddp`. ``--standalone`` runs the rendezvous on
this host, on a free port. Run ``python -m companion.ddp --help`` for the
options.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from ..core.batches import rank_batch_size
from ..core.checks import (
    PROFILE_HELP,
    DefaultsHelp,
    check_int,
    count_arg,
    positive_arg,
    profile_arg,
)
from ..core.data import Data, load_data
from ..core.lines import say
from ..core.models import get_model
from ..core.profiles import get_profile
from ..core.results import summarize
from ..runtime.group import init_from_env
from .training import train_ddp

__all__ = ["build_parser", "check_options", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m companion.ddp`` (started by torchrun)."""
    parser = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc-per-node=N -m companion.ddp",
        description="Train with DistributedDataParallel, one process per device "
        "(gloo on CPUs, nccl with one GPU per process). Unset sizes come from "
        "the profile.",
        formatter_class=DefaultsHelp,
    )
    add = parser.add_argument
    add("--profile", type=profile_arg, help=PROFILE_HELP)
    add("--model", help="lenet, resnet18 or convnet (default: the profile's)")
    add("--epochs", type=positive_arg(int), help="epochs to train (default: the profile's)")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument(
        "--global-batch",
        type=positive_arg(int),
        help="samples per step over all processes, a multiple of N (default: the profile's)",
    )
    batch.add_argument(
        "--per-rank-batch",
        type=positive_arg(int),
        help="samples per step in each process (the global batch is N times this)",
    )
    add("--lr", type=positive_arg(float), help="learning rate (default: the profile's)")
    add(
        "--clip",
        type=positive_arg(float),
        help="clip the gradient's global 2-norm to this before each step (default: no clipping)",
    )
    add(
        "--scale-lr",
        action="store_true",
        help="multiply lr by N (linear scaling, for a fixed --per-rank-batch)",
    )
    add(
        "--find-unused-parameters",
        action="store_true",
        help="let DDP skip parameters that forward does not use (costs an extra "
        "traversal of the autograd graph every step; without it they are an error)",
    )
    add(
        "--precision",
        choices=["fp32", "bf16", "fp16", "auto"],
        help="math of the steps (default: the profile's; auto: bf16 on GPUs of "
        "compute capability 8.0+, fp16 before, fp32 on CPUs)",
    )
    add(
        "--channels-last",
        action="store_true",
        default=None,
        help="store images and weights channels-last (default: the profile's)",
    )
    add("--log-dir", help="TensorBoard log directory (rank 0 writes it)")
    add("--checkpoint", help="checkpoint file (rank 0 writes it atomically)")
    add("--seed", type=count_arg, default=0, help="seed of the model and shuffles")
    add(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: nccl when every process has a GPU, gloo otherwise",
    )
    add(
        "--timeout",
        type=positive_arg(float),
        default=300.0,
        help="seconds before a collective gives up",
    )
    return parser


def check_options(args: argparse.Namespace, world_size: int) -> None:
    """What argparse cannot check alone; ``ValueError`` saying what to do."""
    get_profile(args.profile)  # an unknown profile name raises here
    if args.model is not None:
        get_model(args.model)
    if args.global_batch is not None:
        rank_batch_size(args.global_batch, world_size)
    check_int(args.seed, "--seed", 0, "torch takes seeds below 2**64", 2**64 - 1)
    if args.checkpoint is not None and os.path.isdir(args.checkpoint):
        raise ValueError(
            f"--checkpoint {args.checkpoint} is a directory; give a file name, "
            f"e.g. {os.path.join(args.checkpoint, 'model.pt')}"
        )
    _check_parents("--checkpoint", args.checkpoint)
    _check_parents("--log-dir", args.log_dir)
    if args.log_dir is not None and os.path.isfile(args.log_dir):
        raise ValueError(f"--log-dir {args.log_dir} is a file; give a directory")
    if args.backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("--backend nccl needs CUDA GPUs; use --backend gloo on CPUs")


def _check_parents(option: str, path: str | None) -> None:
    """``ValueError`` if a folder on the way to ``path`` is a regular file."""
    for parent in Path(path or ".").parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(
                    f"{option} {path}: {parent} is a file, not a directory; "
                    f"choose a path in a directory"
                )
            return


def load_data_rank0_first(profile) -> Data:
    """The profile's data on every rank; rank 0 loads (or downloads) it first, alone.

    If rank 0 fails, it tells the others what failed before it raises, so that every
    rank stops at once with the reason (instead of waiting out the group's timeout).
    """
    failed: list[str | None] = [None]
    if dist.get_rank() == 0:
        try:
            data = load_data(profile)
        except Exception as err:
            failed[0] = f"{type(err).__name__}: {err}"
            raise
        finally:
            dist.broadcast_object_list(failed, src=0)  # None: loaded, the others may read it
        return data
    dist.broadcast_object_list(failed, src=0)
    if failed[0] is not None:
        raise RuntimeError(
            f"rank 0 could not load the data ({failed[0]}): fix that and start again"
        )
    return load_data(profile, verbose=False)


def main(argv: list[str] | None = None) -> int:
    """Entry point in every process: check, join the group, train; rank 0 reports."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_options(args, int(os.environ.get("WORLD_SIZE", "1")))
        started = init_from_env(args.backend, args.timeout)
    except (ValueError, RuntimeError) as err:
        parser.error(str(err))

    rank = dist.get_rank()
    try:
        profile = get_profile(args.profile)
        data = load_data_rank0_first(profile)
        result = train_ddp(
            data,
            profile.name,
            model=args.model,
            global_batch=args.global_batch,
            per_rank_batch=args.per_rank_batch,
            epochs=args.epochs,
            lr=args.lr,
            scale_lr=args.scale_lr,
            clip=args.clip,
            find_unused_parameters=args.find_unused_parameters,
            precision=args.precision,
            channels_last=args.channels_last,
            log_dir=args.log_dir,
            checkpoint=args.checkpoint,
            seed=args.seed,
            verbose=rank == 0,
        )
        if rank == 0:
            say(summarize(result.records))
            for what, path in (("checkpoint", args.checkpoint), ("logs", args.log_dir)):
                if path:
                    say(f"{what}: {path}")
        dist.barrier()  # nobody disconnects while a peer may still be reading
    finally:
        if started:
            dist.destroy_process_group()
    return 0
