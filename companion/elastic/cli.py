"""The command line of ``companion.elastic``: the one entry point of every launcher.

Used in: chapter 8.

On one machine, restarting failed workers up to three times::

    torchrun --standalone --nproc-per-node=2 --max-restarts=3 \\
        -m companion.elastic --snapshot run/snapshot.pt

On several machines, the same command after a rendezvous on one of them
(``--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --rdzv-id=JOB``),
which is what the launch files in ``companion/elastic/launch/``
(:data:`~companion.elastic.launchers.LAUNCH_DIR`) run: ``slurm/train.sbatch``
and the Kubernetes manifests in ``kubernetes/``. Run
``python -m companion.elastic --help`` for the options.

Resuming a snapshot that has already trained ``--epochs`` epochs trains
nothing: rank 0 says so and every process exits 0 (a non-zero exit would make
torchrun restart the workers, to the same end). Raise ``--epochs`` to train on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

import torch.distributed as dist

from ..core.checks import DefaultsHelp, positive_arg
from ..core.lines import say
from ..core.profiles import get_profile
from ..core.results import save_records, summarize
from ..ddp.cli import build_parser as ddp_parser
from ..ddp.cli import check_options, load_data_rank0_first
from ..ddp.config import DDPConfig
from .rendezvous import join_elastic
from .snapshot import load_snapshot
from .steplog import parse_kill
from .trainer import DDP, ElasticMethod, ElasticOptions, train_elastic

__all__ = ["build_parser", "main"]

PROG = "torchrun --nproc-per-node=N --max-restarts=K -m companion.elastic"
# companion.ddp's options that an elastic run keeps (the global batch and lr are fixed).
KEPT = (
    "--profile",
    "--model",
    "--epochs",
    "--global-batch",
    "--lr",
    "--clip",
    "--seed",
    "--backend",
    "--timeout",
)


def build_parser(catalog: Mapping[str, ElasticMethod] | None = None) -> argparse.ArgumentParser:
    """The options of ``python -m companion.elastic``: chapter 5's, plus snapshots;
    ``--sharded`` takes the methods of ``catalog`` other than DDP (a later chapter's)."""
    sharded = [name for name in (catalog or {}) if name != "DDP"]
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train with DDP from the last snapshot; torchrun restarts the "
        "workers when one fails. SGD with momentum. The global batch and the lr do not "
        "depend on the number of processes, so a restart may change that number without "
        "changing the training.",
        formatter_class=DefaultsHelp,
    )
    for action in ddp_parser()._actions:
        if set(action.option_strings) & set(KEPT):
            if "--lr" in action.option_strings:  # with momentum, a smaller default step
                action.help = "learning rate (default: the profile's times (1 - momentum))"
            parser._add_action(action)
    add = parser.add_argument
    add(
        "--snapshot",
        required=True,
        help="snapshot file (a folder with --sharded), on storage every node sees",
    )
    if sharded:
        add(
            "--sharded",
            nargs="?",
            const=sharded[-1],
            choices=sharded,
            metavar="METHOD",
            help=f"shard the model (chapter 9) with METHOD, one of {', '.join(sharded)} "
            f"(default: {sharded[-1]}): every process writes its shards of each snapshot, "
            "which then loads on any number of processes",
        )
    add(
        "--snapshot-every",
        type=positive_arg(int),
        default=20,
        help="steps between snapshots; one is also written after every epoch",
    )
    add("--warmup-steps", type=int, default=10, help="linear lr warm-up steps (0: none)")
    add("--momentum", type=float, default=0.9, help="SGD momentum, in [0, 1)")
    add("--log-dir", help="TensorBoard directory (rank 0 writes; never deleted)")
    add("--records", help="JSON file for the per-epoch records (rank 0, atomically)")
    add(
        "--kill-after",
        metavar="WHO:STEP",
        help="tests and chapter 8: after step STEP of the first attempt, rank WHO kills "
        "itself with SIGKILL (WHO 'node': every worker of this agent kills the agent too)",
    )
    return parser


def _check(args: argparse.Namespace) -> None:
    args.checkpoint = None
    args.sharded = getattr(args, "sharded", None)
    check_options(args, int(os.environ.get("WORLD_SIZE", "1")))
    if args.kill_after is not None:
        parse_kill(args.kill_after)
    if os.path.isdir(args.snapshot) and not args.sharded:
        raise ValueError(
            f"--snapshot {args.snapshot} is a directory; give a file name, "
            f"e.g. {os.path.join(args.snapshot, 'snapshot.pt')}"
        )
    if args.warmup_steps < 0:
        raise ValueError(f"--warmup-steps must be >= 0, got {args.warmup_steps}: 0 for none")
    if not 0 <= args.momentum < 1:
        raise ValueError(f"--momentum in [0, 1) is needed, got {args.momentum}: e.g. 0.9, or 0")


def main(argv: list[str] | None = None, catalog: Mapping[str, ElasticMethod] | None = None) -> int:
    """Entry point in every process: check, join the group, train from the snapshot.

    ``catalog``: the methods ``--sharded`` may name (``python -m companion.elastic``
    passes chapter 9's, joined in ``companion.commands``); DDP without it.
    """
    catalog = {"DDP": DDP, **(catalog or {})}
    parser = build_parser(catalog)
    args = parser.parse_args(argv)
    try:
        _check(args)
        started = join_elastic(args.backend, args.timeout)
    except (ValueError, RuntimeError) as err:
        parser.error(str(err))
    rank = dist.get_rank()
    try:
        profile = get_profile(args.profile)
        data = load_data_rank0_first(profile)
        cfg = DDPConfig(
            profile.name,
            args.model,
            args.global_batch,
            epochs=args.epochs,
            lr=args.lr,
            clip=args.clip,
            seed=args.seed,
            verbose=rank == 0,
        )
        method = catalog[args.sharded or "DDP"]
        epochs = cfg.resolve(dist.get_world_size()).epochs
        if done := nothing_left(args.snapshot, epochs, method.load):
            if rank == 0:
                say(done)
            return 0
        opts = ElasticOptions(
            args.snapshot,
            args.snapshot_every,
            args.momentum,
            args.warmup_steps,
            args.log_dir,
            method,
            args.kill_after,
        )
        result = train_elastic(data, cfg, opts)
        if rank == 0 and result.records:
            say(summarize(result.records))
            if args.records:
                save_records(result.records, args.records)
        dist.barrier()  # nobody disconnects while a peer may still be reading
    finally:
        if started:
            dist.destroy_process_group()
    return 0


def nothing_left(path: str, epochs: int, load=load_snapshot) -> str:
    """Why resuming ``path`` (read by ``load``) for ``epochs`` epochs would train nothing,
    or ``""``."""
    snapshot = load(path)
    if snapshot is None or snapshot["epoch"] < epochs:
        return ""
    return (
        f"nothing left to do: the snapshot {path} has trained {snapshot['epoch']} epoch(s) "
        f"(step {snapshot['step']}) and --epochs is {epochs}; give --epochs above "
        f"{snapshot['epoch']} to train on, or another --snapshot to start afresh"
    )
