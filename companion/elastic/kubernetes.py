"""The Kubernetes launch files in ``companion/elastic/launch/kubernetes/``, checked field by field.

Used in: chapter 8.

No schema validator from the package registries knows these custom resources,
so each check reads the fields that must fit together: the image (the one
``launch/Dockerfile`` builds, :func:`~companion.elastic.launchers.check_dockerfile`),
the command (torchrun, then ``-m companion.elastic`` with options it accepts),
the number of nodes and of processes per node (equal to the GPUs per node),
every world size against the global batch, and the snapshot on a mounted
volume.

* :func:`check_trainjob`: a Kubeflow Trainer v2 ``TrainJob`` on the
  ``torch-distributed`` runtime (the current API; a fixed number of nodes);
* :func:`check_pytorchjob`: a legacy Training Operator v1 ``PyTorchJob`` with
  an ``elasticPolicy`` (a range of nodes);
* :func:`check_t9k_job`: seed 003's TensorStack ``PyTorchTrainingJob``.
"""

from __future__ import annotations

import functools
import os

from .launchers import LaunchFileError, _fail_unless, check_dockerfile, check_entry_point

__all__ = ["check_pytorchjob", "check_t9k_job", "check_trainjob"]

GPU = "nvidia.com/gpu"


def _manifest(check):
    """``check`` that refuses a doc that is not a dict, and names a key the manifest lacks."""

    @functools.wraps(check)
    def checked(doc: dict, path="") -> dict:
        if not isinstance(doc, dict):
            raise TypeError(
                f"doc must be the manifest as a dict, got {type(doc).__name__}: pass "
                f"yaml.safe_load(open(path)), and path to name the file in errors"
            )
        try:
            return check(doc, path)
        except KeyError as err:
            raise LaunchFileError(
                f"{path}: no {err.args[0]!r} where the manifest needs one"
            ) from err

    return checked


def _kind(doc: dict, api: str, kind: str, path) -> None:
    _fail_unless((doc["apiVersion"], doc["kind"]) == (api, kind), path, f"not a {api} {kind}")


def _container(template: dict) -> dict:
    return template["spec"]["containers"][0]


def _image(container: dict, path) -> str:
    built = check_dockerfile()["image"]
    _fail_unless(
        container.get("image") == built,
        path,
        f"image {container.get('image')} is not {built}, the image "
        "companion/elastic/launch/Dockerfile builds with companion installed",
    )
    return built


def _mounted(container: dict, file: str, path) -> None:
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    full = file if file.startswith("/") else f"{container.get('workingDir', '')}/{file}"
    _fail_unless(
        any(full.startswith(m.rstrip("/") + "/") for m in mounts),
        path,
        f"{full} is not on a mounted volume: a restarted pod would not find it",
    )


def _gpus(resources: dict, nproc: int, path, what: str) -> None:
    for kind in ("limits", "requests"):
        gpus = resources.get(kind, {}).get(GPU)
        _fail_unless(
            gpus is None or int(gpus) == nproc,
            path,
            f"{what} {nproc} differs from the {GPU} {kind} ({gpus}): one process per GPU",
        )


@_manifest
def check_trainjob(doc: dict, path="") -> dict:
    """A Trainer v2 ``TrainJob``: runtime, image, nodes x GPUs, torchrun's options, volume.

    The ``torch-distributed`` runtime sets torchrun's ``PET_NNODES`` from
    ``numNodes`` and ``PET_NPROC_PER_NODE`` from ``numProcPerNode`` (default
    ``auto``: one per GPU of ``resourcesPerNode``); options given on the
    command line override them, so they must agree.
    """
    from torch.distributed.run import get_args_parser

    _kind(doc, "trainer.kubeflow.org/v1alpha1", "TrainJob", path)
    spec, trainer = doc["spec"], doc["spec"]["trainer"]
    _fail_unless(
        spec["runtimeRef"]["name"] == "torch-distributed",
        path,
        f"runtime {spec['runtimeRef']['name']}: use the torch-distributed runtime",
    )
    image = _image(trainer, path)
    nodes, resources = int(trainer.get("numNodes", 1)), trainer.get("resourcesPerNode", {})
    gpus = resources.get("limits", {}).get(GPU)
    _fail_unless(
        gpus is not None or "numProcPerNode" in trainer,
        path,
        f"give resourcesPerNode.limits.{GPU} (one process per GPU) or numProcPerNode",
    )
    nproc = int(trainer.get("numProcPerNode", gpus))
    _gpus(resources, nproc, path, "numProcPerNode")
    command = [*trainer.get("command", []), *trainer.get("args", [])]
    _fail_unless(command[:1] == ["torchrun"], path, "the container must start torchrun")
    i = command.index("-m") if "-m" in command else len(command)
    run = get_args_parser().parse_args([*command[1:i], "-m", "companion.elastic"])
    for option, value, field in (("nnodes", nodes, "numNodes"), ("nproc_per_node", nproc, None)):
        given = f"--{option.replace('_', '-')}" in " ".join(command[1:i])
        _fail_unless(
            not given or getattr(run, option) == str(value),
            path,
            f"torchrun --{option.replace('_', '-')}={getattr(run, option)} overrides the "
            f"runtime's {value} ({field or 'one process per GPU'}): leave it out",
        )
    summary = check_entry_point(command[i:], [nodes * nproc], path)
    container = {"workingDir": "/runs", "volumeMounts": []}
    for patch in spec.get("runtimePatches", []):
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            for c in job["template"]["spec"]["template"]["spec"].get("containers", []):
                if c["name"] == "node":
                    container["volumeMounts"] += c.get("volumeMounts", [])
    _mounted(container, summary["snapshot"], path)
    return {"image": image, "nodes": nodes, "processes per node": nproc, **summary}


@_manifest
def check_pytorchjob(doc: dict, path="") -> dict:
    """A Kubeflow ``PyTorchJob`` with an ``elasticPolicy``: replicas, GPUs, command, volume."""
    _kind(doc, "kubeflow.org/v1", "PyTorchJob", path)
    spec, policy = doc["spec"], doc["spec"]["elasticPolicy"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    low, high, nproc = policy["minReplicas"], policy["maxReplicas"], int(spec["nprocPerNode"])
    _fail_unless(
        low <= worker["replicas"] <= high,
        path,
        f"replicas {worker['replicas']} outside minReplicas..maxReplicas {low}..{high}",
    )
    container = _container(worker["template"])
    image = _image(container, path)
    _gpus(container["resources"], nproc, path, "nprocPerNode")
    _fail_unless(policy.get("maxRestarts", 0) > 0, path, "set maxRestarts > 0")
    command = [*container.get("command", []), *container.get("args", [])]
    _fail_unless(command[:1] == ["torchrun"], path, "the container must start torchrun")
    summary = check_entry_point(command[1:], [n * nproc for n in range(low, high + 1)], path)
    _mounted(container, summary["snapshot"], path)
    return {"image": image, "nodes": f"{low}..{high}", "processes per node": nproc, **summary}


@_manifest
def check_t9k_job(doc: dict, path="") -> dict:
    """TensorStack's ``PyTorchTrainingJob``: torchrun settings, GPUs, args, logs it serves."""
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
    image = _image(container, path)
    _gpus(container["resources"], nproc, path, "procPerNode")
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
    return {"image": image, "nodes": node["replicas"], "processes per node": nproc, **summary}
