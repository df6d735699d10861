"""The wheel ships chapter 8's launch files, and a companion installed from it finds and checks them.

A Colab reader installs companion from a wheel (``pip install "companion @ git+<repo>"``), which
holds only what the package ships: no repository around it, no pyproject.toml. So the wheel is
built here from a copy of the package's sources (offline, with this environment's setuptools; a
copy, so the build leaves nothing in the checkout), installed without its dependencies into a
fresh venv that sees this environment's packages (torch, yaml) behind its own, and a process
started outside the checkout reads every launch file through ``LAUNCH_DIR`` and runs the checks,
which take the version and the torch floor from the installed package's metadata.
"""

import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from companion.elastic import check_dockerfile, check_sbatch

pytestmark = pytest.mark.ch8

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "companion" / "elastic" / "launch"
LAUNCH_FILES = sorted(p.relative_to(LAUNCH).as_posix() for p in LAUNCH.rglob("*") if p.is_file())
TIMEOUT = 120  # seconds per command; each takes a few
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

# Run by the venv's Python from outside the checkout; prints what it found as JSON.
READ_AND_CHECK = """
import json, sys
import yaml
import companion
from companion.elastic import (LAUNCH_DIR, check_dockerfile, check_pytorchjob, check_sbatch,
                               check_t9k_job, check_trainjob)

texts = {name: (LAUNCH_DIR / name).read_text() for name in json.loads(sys.argv[1])}
manifest = lambda name: yaml.safe_load(texts["kubernetes/" + name])
print(json.dumps({
    "companion": companion.__file__,
    "launch dir": str(LAUNCH_DIR),
    "texts": texts,
    "dockerfile": check_dockerfile(),
    "sbatch": check_sbatch(LAUNCH_DIR / "slurm" / "train.sbatch"),
    "trainjob": check_trainjob(manifest("trainjob.yaml")),
    "pytorchjob": check_pytorchjob(manifest("pytorchjob.yaml")),
    "t9k": check_t9k_job(manifest("t9k-pytorchtrainingjob.yaml")),
}))
"""


def run(argv: list, **kwargs) -> str:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **OFFLINE}
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT, env=env, **kwargs
    )
    assert done.returncode == 0, (
        f"{shlex.join(map(str, argv))} exited {done.returncode}:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from the repository, as ``pip install git+<repo>`` does."""
    source = tmp_path_factory.mktemp("source")
    for name in ["pyproject.toml", "README.md", *(p.name for p in ROOT.glob("LICEN[CS]E*"))]:
        shutil.copy2(ROOT / name, source / name)
    for package in ("companion", "companion_tools"):
        shutil.copytree(
            ROOT / package,
            source / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )
    out = tmp_path_factory.mktemp("wheel")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            out,
            source,
        ],
        cwd=source,
    )
    [built] = out.glob("companion-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> tuple[Path, Path]:
    """A fresh venv with the wheel installed; this environment's packages come after its own."""
    root = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", root])
    python = root / "bin" / "python"
    purelib = Path(
        run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip()
    )
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel])
    # Written after the installation, so that pip saw only the venv. A .pth's folders go to the
    # end of sys.path, after the venv's site-packages: the wheel's companion comes first.
    (purelib / "this-environment.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    return python, purelib


def test_the_wheel_holds_every_launch_file(wheel):
    assert {"Dockerfile", "slurm/train.sbatch", "kubernetes/trainjob.yaml"} <= set(LAUNCH_FILES)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in LAUNCH_FILES if f"companion/elastic/launch/{f}" not in names]
    assert not missing, f"not in the wheel: {missing}: list them in pyproject.toml's package-data"


def test_the_installed_wheel_reads_and_checks_its_launch_files_outside_the_checkout(venv, tmp_path):
    python, purelib = venv
    found = json.loads(
        run([python, "-I", "-c", READ_AND_CHECK, json.dumps(LAUNCH_FILES)], cwd=tmp_path)
    )
    assert Path(found["companion"]).is_relative_to(purelib), (
        f"companion came from {found['companion']}, not from the wheel in {purelib}"
    )
    assert Path(found["launch dir"]) == purelib / "companion" / "elastic" / "launch"
    assert found["texts"] == {f: (LAUNCH / f).read_text() for f in LAUNCH_FILES}
    # The same verdicts as the checkout's files give here.
    assert found["dockerfile"] == check_dockerfile(LAUNCH / "Dockerfile")
    assert found["sbatch"] == check_sbatch(LAUNCH / "slurm" / "train.sbatch")
    for kind in ("trainjob", "pytorchjob", "t9k"):
        assert found[kind]["image"] == found["dockerfile"]["image"]


def test_the_wheel_ships_the_committed_gpu_measurements_and_reads_them_outside_the_checkout(
    wheel, venv, tmp_path
):
    """Chapters 1 and 7 show them in Colab too, where only the wheel is installed."""
    results = ROOT / "companion_tools" / "bench" / "results"
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        p.name for p in results.iterdir() if f"companion_tools/bench/results/{p.name}" not in names
    ]
    assert not missing, f"not in the wheel: {missing}: list them in pyproject.toml's package-data"
    python, purelib = venv
    code = (
        "import json; from companion_tools.bench.record import RESULTS, committed; "
        "seen, study = committed(); print(json.dumps([str(RESULTS), seen['hardware'], len(study)]))"
    )
    where, hardware, n = json.loads(run([python, "-I", "-c", code], cwd=tmp_path))
    assert Path(where) == purelib / "companion_tools" / "bench" / "results"
    assert hardware == json.loads((results / "h200-record.json").read_text())["hardware"] and n > 0
