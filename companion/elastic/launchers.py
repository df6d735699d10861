"""The launch files in ``launch/``, read and checked against the entry point they run.

Used in: chapter 8.

A launch file fails far from the laptop it was written on: a world size that
does not divide the global batch, a GPU count that does not match the
processes per node, an option the program does not have, an image without
the program. Each check reads one kind of file, derives the torchrun command
and the world size it gives, and raises :class:`LaunchFileError` naming the
inconsistency:

* :func:`check_sbatch`: the SLURM script is *run*, with stand-ins for
  ``srun`` and ``scontrol`` that record the command instead of starting it;
* :func:`check_dockerfile`: ``launch/Dockerfile``, the image of every
  Kubernetes manifest: its base image's torch against the package's floor,
  and the installation of companion;
* the Kubernetes manifests, in :mod:`companion.elastic.kubernetes`.

Each returns a summary (a dict) of what the job would run.

``launch/`` is package data (``companion/elastic/launch/``, in the wheel too):
:data:`LAUNCH_DIR` is found with ``importlib.resources``, and the version
and torch floor the image must match are the installed package's metadata
(pyproject.toml's, read with ``importlib.metadata``), so the checks run
the same from a wheel (Colab) as from the repository.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from importlib import metadata, resources
from pathlib import Path

from .cli import build_parser

__all__ = [
    "LAUNCH_DIR",
    "LaunchFileError",
    "check_dockerfile",
    "check_entry_point",
    "check_sbatch",
]

# Package data, a real folder wherever companion is installed (a wheel, or -e .).
LAUNCH_DIR = Path(str(resources.files(__package__) / "launch"))


class LaunchFileError(ValueError):
    """A launch file whose parts do not fit together."""


def _fail_unless(ok: bool, path, message: str) -> None:
    if not ok:
        raise LaunchFileError(f"{path}: {message}")


def check_entry_point(argv: list[str], world_sizes: list[int], path="") -> dict:
    """``argv`` (after torchrun's options) must be ``-m companion.elastic`` with valid options.

    Every world size the job can have must divide the global batch.
    """
    _fail_unless(
        argv[:2] == ["-m", "companion.elastic"],
        path,
        f"runs {shlex.join(argv[:2])}, not the entry point -m companion.elastic",
    )
    try:
        args = build_parser().parse_args(argv[2:])
    except SystemExit:
        raise LaunchFileError(f"{path}: options companion.elastic rejects: {argv[2:]}") from None
    for world in world_sizes:
        _fail_unless(
            args.global_batch is not None and args.global_batch % world == 0,
            path,
            f"--global-batch {args.global_batch} is not a multiple of the world size "
            f"{world}: give one that every world size of the job divides",
        )
    return {
        "world sizes": world_sizes,
        "global batch": args.global_batch,
        "snapshot": args.snapshot,
        "log dir": args.log_dir,
    }


def check_sbatch(path: str | Path, nodes: tuple[str, ...] = ("node1", "node2")) -> dict:
    """Run the batch script with stand-ins for ``srun``/``scontrol``; check what it launches."""
    path = Path(path)
    header = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", path.read_text(), re.MULTILINE))
    n_nodes, gpus = int(header["nodes"]), int(header.get("gpus-per-node", 0))
    _fail_unless(
        header.get("ntasks-per-node") == "1",
        path,
        "--ntasks-per-node must be 1: one torchrun agent per node starts the processes",
    )
    _fail_unless(len(nodes) == n_nodes, path, f"asks for {n_nodes} nodes, test gives {len(nodes)}")
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir, record = Path(tmp, "bin"), Path(tmp, "srun.args")
        bin_dir.mkdir()
        stand_ins = {
            "srun": f'printf "%s\\0" "$@" > {shlex.quote(str(record))}',
            "scontrol": f"printf '%s\\n' {' '.join(nodes)}",
        }
        for name, body in stand_ins.items():
            (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
            (bin_dir / name).chmod(0o755)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": tmp,
            "SLURM_JOB_NODELIST": f"node[1-{n_nodes}]",
            "SLURM_JOB_NUM_NODES": str(n_nodes),
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NAME": header["job-name"],
        }
        ran = subprocess.run(
            ["bash", str(path)], env=env, timeout=60, capture_output=True, text=True
        )
        _fail_unless(ran.returncode == 0, path, f"the script failed: {ran.stderr[-500:]}")
        argv = [a.replace(tmp, "$HOME") for a in record.read_text().split("\0")[:-1]]
    return _check_torchrun(argv, n_nodes, gpus, path) | {"rendezvous host": nodes[0]}


def _check_torchrun(argv: list[str], n_nodes: int, gpus: int, path) -> dict:
    from torch.distributed.run import get_args_parser

    _fail_unless(argv[:1] == ["torchrun"], path, f"srun starts {argv[:1]}, not torchrun")
    run = get_args_parser().parse_args(argv[1:])
    nproc = int(run.nproc_per_node)
    _fail_unless(
        run.nnodes == str(n_nodes),
        path,
        f"torchrun --nnodes={run.nnodes}, but the job has {n_nodes} nodes",
    )
    _fail_unless(
        not gpus or nproc == gpus,
        path,
        f"{nproc} processes per node on {gpus} GPUs per node: make them equal",
    )
    _fail_unless(
        run.rdzv_backend == "c10d" and run.max_restarts > 0,
        path,
        "use --rdzv-backend=c10d and --max-restarts > 0 so that failed workers restart",
    )
    summary = check_entry_point(
        [*(["-m"] if run.module else []), run.training_script, *run.training_script_args],
        [n_nodes * nproc],
        path,
    )
    return {
        "torchrun": shlex.join(argv[: argv.index("-m")]),
        "nodes": n_nodes,
        "processes per node": nproc,
        **summary,
    }


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def _installed(package: str = "companion") -> tuple[str, str]:
    """The installed ``package``'s version and torch floor, from its metadata (pyproject.toml's)."""
    try:
        version, requires = metadata.version(package), metadata.requires(package) or []
    except metadata.PackageNotFoundError:
        raise LaunchFileError(
            f"{package} is not installed, so it has no metadata to read its version and torch "
            f"floor from: pip install it (pip install -e . in the repository)"
        ) from None
    floors = [m[1] for r in requires if (m := re.match(r"torch\s*>=\s*([\d.]+)", r))]
    if not floors:
        raise LaunchFileError(
            f"the installed {package} {version} requires no torch>=X (its metadata: {requires}): "
            f"give the floor in pyproject.toml's dependencies and reinstall the package"
        )
    return version, floors[0]


def check_dockerfile(path: str | Path = LAUNCH_DIR / "Dockerfile") -> dict:
    """The image the manifests run: a PyTorch base at the package's torch floor, companion in it.

    The floor and the version the tag must carry are the installed package's
    (``importlib.metadata``). Returns ``{"image": the tag it is built as,
    "base": ..., "torch": the base's torch, "floor": the package's torch floor}``.
    """
    path = Path(path)
    text = re.sub(r"\\\n", " ", path.read_text())
    base = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    _fail_unless(len(base) == 1, path, f"needs exactly one FROM line, has {len(base)}")
    repo, _, tag = base[0].partition(":")
    _fail_unless(
        repo == "pytorch/pytorch" and "cuda" in tag,
        path,
        f"FROM {base[0]}: start from a pytorch/pytorch CUDA image (torch, CUDA and NCCL inside)",
    )
    version, floor = _installed()
    _fail_unless(
        _version(tag) >= _version(floor),
        path,
        f"the base image has torch {tag.split('-')[0]}, the package needs torch>={floor} "
        f"(the installed companion {version}'s requirement, from pyproject.toml)",
    )
    _fail_unless(
        re.search(r"^RUN .*pip install[^\n]* \.(\s|&&|$)", text, re.MULTILINE) is not None
        and re.search(r"^COPY companion\b", text, re.MULTILINE) is not None,
        path,
        "copy the companion package in and pip install the repository (.)",
    )
    image = re.search(r'^LABEL org\.opencontainers\.image\.ref\.name="([^"]+)"', text, re.M)
    _fail_unless(image is not None, path, "name the image: LABEL org.opencontainers.image.ref.name")
    _fail_unless(
        image[1].endswith(f":{version}"),
        path,
        f"image {image[1]}: tag it with the package version {version} (the installed "
        f"companion's metadata, from pyproject.toml)",
    )
    _fail_unless(
        f"-t {image[1]} " in text,
        path,
        f"the build command in the comments must tag the image {image[1]}",
    )
    return {"image": image[1], "base": base[0], "torch": tag.split("-")[0], "floor": floor}
