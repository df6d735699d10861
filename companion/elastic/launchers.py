"""The launch files in ``launch/``, read and checked against the entry point they run.

Used in: chapter 8.

A launch file fails far from the laptop it was written on: a world size that
does not divide the global batch, a GPU count that does not match the
processes per node, an option the program does not have. Each check below
reads one kind of file, derives the torchrun command and the world size it
gives, and raises :class:`LaunchFileError` naming the inconsistency:

* :func:`check_sbatch`: the SLURM script is *run*, with stand-ins for
  ``srun`` and ``scontrol`` that record the command instead of starting it;
* :func:`check_pytorchjob`: a Kubeflow ``PyTorchJob`` (torchrun's options come
  from the operator's ``PET_*`` variables, the entry point from the command);
* :func:`check_t9k_job`: seed 003's TensorStack ``PyTorchTrainingJob``.

Each returns a summary (a dict) of what the job would run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from .cli import build_parser

__all__ = [
    "LAUNCH_DIR",
    "LaunchFileError",
    "check_entry_point",
    "check_sbatch",
    "check_pytorchjob",
    "check_t9k_job",
]

LAUNCH_DIR = Path(__file__).resolve().parents[2] / "launch"
GPU = "nvidia.com/gpu"


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


def _container(template: dict) -> dict:
    return template["spec"]["containers"][0]


def _mounted(container: dict, file: str, path) -> None:
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    full = file if file.startswith("/") else f"{container.get('workingDir', '')}/{file}"
    _fail_unless(
        any(full.startswith(m.rstrip("/") + "/") for m in mounts),
        path,
        f"{full} is not on a mounted volume: a restarted pod would not find it",
    )


def check_pytorchjob(doc: dict, path="") -> dict:
    """A Kubeflow ``PyTorchJob`` with an ``elasticPolicy``: replicas, GPUs, command, volume."""
    _fail_unless(
        (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v1", "PyTorchJob"),
        path,
        "not a kubeflow.org/v1 PyTorchJob",
    )
    spec, policy = doc["spec"], doc["spec"]["elasticPolicy"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    low, high, nproc = policy["minReplicas"], policy["maxReplicas"], int(spec["nprocPerNode"])
    _fail_unless(
        low <= worker["replicas"] <= high,
        path,
        f"replicas {worker['replicas']} outside minReplicas..maxReplicas {low}..{high}",
    )
    container = _container(worker["template"])
    _fail_unless(
        int(container["resources"]["limits"].get(GPU, nproc)) == nproc,
        path,
        f"nprocPerNode {nproc} differs from the {GPU} limit",
    )
    _fail_unless(policy.get("maxRestarts", 0) > 0, path, "set maxRestarts > 0")
    command = [*container.get("command", []), *container.get("args", [])]
    _fail_unless(command[:1] == ["torchrun"], path, "the container must start torchrun")
    summary = check_entry_point(command[1:], [n * nproc for n in range(low, high + 1)], path)
    _mounted(container, summary["snapshot"], path)
    return {"nodes": f"{low}..{high}", "processes per node": nproc, **summary}


def check_t9k_job(doc: dict, path="") -> dict:
    """Seed 003's ``PyTorchTrainingJob``: torchrun settings, GPUs, args, logs the server reads."""
    _fail_unless(doc["kind"] == "PyTorchTrainingJob", path, "not a PyTorchTrainingJob")
    spec = doc["spec"]
    run, [node] = spec["torchrunConfig"], spec["replicaSpecs"]
    nproc = int(run["procPerNode"])
    _fail_unless(
        run["enabled"] and run["maxRestarts"] > 0 and run["rdzvBackend"] == "c10d",
        path,
        "enable torchrun with a c10d rendezvous and maxRestarts > 0",
    )
    container = _container(node["template"])
    for kind in ("limits", "requests"):
        _fail_unless(
            int(container["resources"][kind].get(GPU, nproc)) == nproc,
            path,
            f"procPerNode {nproc} differs from the {GPU} {kind}",
        )
    summary = check_entry_point(container["args"], [node["replicas"] * nproc], path)
    _mounted(container, summary["snapshot"], path)
    served = [
        os.path.normpath(p)
        for pvc in spec["tensorboardSpec"]["logDir"]["pvc"]
        for p in pvc["subPath"]
    ]
    _fail_unless(
        os.path.normpath(summary["log dir"]) in served,
        path,
        f"--log-dir {summary['log dir']} is not the directory TensorBoard serves {served}",
    )
    return {"nodes": node["replicas"], "processes per node": nproc, **summary}
