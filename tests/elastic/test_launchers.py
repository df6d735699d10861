"""The shipped launch files run the entry point the tests run, with consistent GPUs, processes,
nodes and world sizes; each kind of inconsistency is caught with a message saying what to fix.

No schema validator from the package registries knows these custom resources (kubernetes-validate
covers Kubernetes' own kinds, not Kubeflow's TrainJob and PyTorchJob or TensorStack's
PyTorchTrainingJob), so the fields are checked here, by reading them. No Docker engine runs here
either: the Dockerfile is read, not built."""

import copy
import re
import subprocess
import tomllib
import types
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from companion.elastic import launchers
from companion.elastic.kubernetes import check_pytorchjob, check_t9k_job, check_trainjob
from companion.elastic.launchers import LAUNCH_DIR, LaunchFileError, check_dockerfile, check_sbatch

pytestmark = pytest.mark.ch8

SBATCH = LAUNCH_DIR / "slurm" / "train.sbatch"
PYTORCHJOB = yaml.safe_load((LAUNCH_DIR / "kubernetes" / "pytorchjob.yaml").read_text())
T9K = yaml.safe_load((LAUNCH_DIR / "kubernetes" / "t9k-pytorchtrainingjob.yaml").read_text())
TRAINJOB = yaml.safe_load((LAUNCH_DIR / "kubernetes" / "trainjob.yaml").read_text())
DOCKERFILE = LAUNCH_DIR / "Dockerfile"
IMAGE = "ghcr.io/dp-from-scratch/companion:0.1.0"
VERSION, FLOOR = launchers._installed()  # the installed package's metadata
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_slurm_script_starts_one_agent_per_node_with_the_rendezvous_on_the_first():
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    summary = check_sbatch(SBATCH)
    assert summary["torchrun"] == (
        "torchrun --nnodes=2 --nproc-per-node=4 --max-restarts=3 "
        "--rdzv-backend=c10d --rdzv-endpoint=node1:29500 --rdzv-id=4242"
    )
    assert summary["world sizes"] == [8] and summary["global batch"] % 8 == 0
    assert summary["snapshot"] == "$HOME/runs/companion-elastic/snapshot.pt"


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("--gpus-per-node=4", "--gpus-per-node=2", "4 processes per node on 2 GPUs per node"),
        ("--ntasks-per-node=1", "--ntasks-per-node=4", "--ntasks-per-node must be 1"),
        ("--global-batch 512", "--global-batch 500", "not a multiple of the world size 8"),
        ("--max-restarts=3", "--max-restarts=0", "--max-restarts > 0"),
        ("-m companion.elastic", "-m companion.ddp", "not the entry point -m companion.elastic"),
        ("--snapshot-every 200", "--snapshot-every 0", "options companion.elastic rejects"),
    ],
)
def test_an_inconsistent_slurm_script_is_caught(tmp_path, old, new, message):
    broken = tmp_path / "train.sbatch"
    broken.write_text(SBATCH.read_text().replace(old, new))
    with pytest.raises(LaunchFileError, match=message.replace("(", r"\(")):
        check_sbatch(broken)


def test_the_pytorchjob_fits_every_world_size_of_its_elastic_range():
    summary = check_pytorchjob(PYTORCHJOB)
    assert summary["world sizes"] == [4, 8] and summary["nodes"] == "1..2"
    assert summary["image"] == IMAGE


def broken(doc: dict, where: str, value) -> dict:
    doc = copy.deepcopy(doc)
    *path, last = where.split(".")
    node = doc
    for key in path:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = value
    return doc


CONTAINER = "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0"


@pytest.mark.parametrize(
    "where, value, message",
    [
        ("spec.nprocPerNode", "3", "nprocPerNode 3 differs from the nvidia.com/gpu limits"),
        (
            f"{CONTAINER}.image",
            "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "is not ghcr.io/dp-from-scratch/companion:0.1.0, the image "
            "companion/elastic/launch/Dockerfile builds",
        ),
        ("spec.pytorchReplicaSpecs.Worker.replicas", 3, "outside minReplicas..maxReplicas 1..2"),
        ("spec.elasticPolicy.maxReplicas", 3, "not a multiple of the world size 12"),
        ("spec.elasticPolicy.maxRestarts", 0, "set maxRestarts > 0"),
        (f"{CONTAINER}.command", ["python", "train.py"], "must start torchrun"),
        (f"{CONTAINER}.volumeMounts", [], "is not on a mounted volume"),
    ],
)
def test_an_inconsistent_pytorchjob_is_caught(where, value, message):
    with pytest.raises(LaunchFileError, match=message):
        check_pytorchjob(broken(PYTORCHJOB, where, value))


def test_seed_003s_job_done_correctly():
    summary = check_t9k_job(T9K)
    assert summary["world sizes"] == [4] and summary["log dir"] == "run/log"
    node = T9K["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert "--save_path" not in node["args"] and T9K["spec"]["torchrunConfig"]["maxRestarts"] == 3


T9K_CONTAINER = "spec.replicaSpecs.0.template.spec.containers.0"


@pytest.mark.parametrize(
    "where, value, message",
    [
        (
            "spec.torchrunConfig.procPerNode",
            "8",
            "procPerNode 8 differs from the nvidia.com/gpu limits",
        ),
        (
            f"{T9K_CONTAINER}.image",
            "t9kpublic/pytorch-1.13.0:sdk-0.5.2",
            "the image companion/elastic/launch/Dockerfile",
        ),
        (
            f"{T9K_CONTAINER}.args",
            ["torch_mnist_trainingjob.py", "--log_dir", "log"],
            "not the entry point",
        ),
        (
            "spec.tensorboardSpec.logDir.pvc.0.subPath",
            ["./log"],
            "not the directory TensorBoard serves",
        ),
        (f"{T9K_CONTAINER}.workingDir", "/tmp", "is not on a mounted volume"),
    ],
)
def test_an_inconsistent_t9k_job_is_caught(where, value, message):
    with pytest.raises(LaunchFileError, match=message):
        check_t9k_job(broken(T9K, where, value))


def test_the_launch_directory_is_package_data_beside_the_checks():
    assert LAUNCH_DIR.name == "launch" and LAUNCH_DIR.parent == Path(launchers.__file__).parent
    assert SBATCH.exists() and DOCKERFILE.exists()


def test_the_installed_metadata_is_pyproject_tomls():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    [floor] = [m[1] for d in project["dependencies"] if (m := re.fullmatch(r"torch>=(.+)", d))]
    assert (VERSION, FLOOR) == (project["version"], floor), (
        "the installed metadata is stale: pip install --no-deps --no-build-isolation -e ."
    )


def test_the_dockerfile_installs_companion_on_a_pytorch_image_at_the_packages_floor():
    summary = check_dockerfile(DOCKERFILE)
    assert summary["image"] == IMAGE and summary["base"].startswith("pytorch/pytorch:")
    assert summary["floor"] == FLOOR
    assert launchers._version(summary["torch"]) >= launchers._version(FLOOR)


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            "FROM pytorch/pytorch:1.13.0-cuda11.6-cudnn8-runtime",
            f"the package needs torch>={FLOOR} ",
        ),
        (
            "FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            "FROM python:3.12",
            "start from a pytorch/pytorch CUDA image",
        ),
        (
            "pip install --no-cache-dir .",
            "pip install --no-cache-dir torch",
            "pip install the repository",
        ),
        ('companion:0.1.0"', 'companion:latest"', f"tag it with the package version {VERSION} "),
        ("-t ghcr.io/dp-from-scratch/companion:0.1.0 .", "-t companion .", "must tag the image"),
    ],
)
def test_an_inconsistent_dockerfile_is_caught(tmp_path, old, new, message):
    broken = tmp_path / "Dockerfile"
    assert old in DOCKERFILE.read_text()
    broken.write_text(DOCKERFILE.read_text().replace(old, new))
    with pytest.raises(LaunchFileError, match=re.escape(message)):
        check_dockerfile(broken)


def installed(monkeypatch, version="0.1.0", requires=("torch>=2.11", "torchvision>=0.26")):
    """Stand in for the installed package's metadata, as ``importlib.metadata`` reads it."""

    def read(what):
        def lookup(name):
            assert name == "companion"
            if what is None:
                raise metadata.PackageNotFoundError(name)
            return what

        return lookup

    fake = types.SimpleNamespace(
        version=read(version),
        requires=read(requires and list(requires)),
        PackageNotFoundError=metadata.PackageNotFoundError,
    )
    monkeypatch.setattr(launchers, "metadata", fake)


@pytest.mark.parametrize(
    "version, requires, message",
    [
        (
            "0.1.0",
            ["torchvision>=0.29", "torch>=2.14"],
            "the package needs torch>=2.14 (the installed companion 0.1.0's requirement, "
            "from pyproject.toml)",
        ),
        (
            "0.2.0",
            ["torch>=2.11"],
            "tag it with the package version 0.2.0 (the installed companion's metadata, "
            "from pyproject.toml)",
        ),
        ("0.1.0", ["numpy"], "the installed companion 0.1.0 requires no torch>=X"),
        (None, None, "companion is not installed, so it has no metadata"),
    ],
)
def test_the_floor_and_version_come_from_the_installed_metadata(
    monkeypatch, version, requires, message
):
    installed(monkeypatch, version, requires)
    with pytest.raises(LaunchFileError, match=re.escape(message)):
        check_dockerfile(DOCKERFILE)


def test_a_lower_floor_in_the_metadata_passes(monkeypatch):
    installed(monkeypatch, requires=["torch >= 2.0", "torchvision>=0.15"])
    assert check_dockerfile(DOCKERFILE)["floor"] == "2.0"


def test_the_trainjob_runs_the_image_and_entry_point_on_every_gpu():
    summary = check_trainjob(TRAINJOB)
    assert summary["image"] == IMAGE and summary["world sizes"] == [8]
    assert (summary["nodes"], summary["processes per node"]) == (2, 4)
    assert TRAINJOB["spec"]["runtimeRef"]["name"] == "torch-distributed"


TRAINER = "spec.trainer"
NODE = (
    "spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0"
    ".template.spec.template.spec.containers.0"
)


@pytest.mark.parametrize(
    "where, value, message",
    [
        (
            f"{TRAINER}.image",
            "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            "the image companion/elastic/launch/Dockerfile builds",
        ),
        (f"{TRAINER}.numNodes", 3, "not a multiple of the world size 12"),
        (f"{TRAINER}.numProcPerNode", 2, "numProcPerNode 2 differs from the nvidia.com/gpu limits"),
        (f"{TRAINER}.resourcesPerNode", {}, "give resourcesPerNode.limits.nvidia.com/gpu"),
        (
            f"{TRAINER}.command",
            ["torchrun", "--nnodes=1", "-m", "companion.elastic"],
            "--nnodes=1 overrides the runtime's 2",
        ),
        (
            f"{TRAINER}.command",
            ["torchrun", "--nproc-per-node=2", "-m", "companion.elastic"],
            "--nproc-per-node=2 overrides the runtime's 4",
        ),
        (f"{TRAINER}.command", ["python", "-m", "companion.elastic"], "must start torchrun"),
        ("spec.runtimeRef.name", "mpi-distributed", "use the torch-distributed runtime"),
        (f"{NODE}.volumeMounts", [], "is not on a mounted volume"),
    ],
)
def test_an_inconsistent_trainjob_is_caught(where, value, message):
    with pytest.raises(LaunchFileError, match=message.replace(".", r"\.")):
        check_trainjob(broken(TRAINJOB, where, value))
