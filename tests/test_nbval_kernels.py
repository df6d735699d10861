"""nbval's kernels under `make test`: they exit by themselves, and a stray file fails the run.

nbval kills each notebook's kernel, so ``atexit`` never ran and chapters 5, 7
and 8 left their work folders in ``/tmp`` on every CI run. ``tests/conftest.py``
asks the kernel to shut down instead (as Jupyter does) and checks its private
``TMPDIR``; these tests run nbval on two small notebooks through that conftest.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]


def run_nbval(tmp_path: Path, *sources: str, options=()) -> subprocess.CompletedProcess:
    book = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), book)
    system_tmp = tmp_path / "system-tmp"  # where a killed kernel's files would stay
    system_tmp.mkdir()
    path = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )  # keep the caller's
    env = {**os.environ, "TMPDIR": str(system_tmp), "PYTHONPATH": path}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--nbval-lax",
            "--nbval-current-env",
            "-q",
            *options,
            str(book),
            "--rootdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    done.system_tmp = sorted(p.name for p in system_tmp.iterdir())
    return done


def test_a_scratch_folder_is_removed_when_nbval_stops_the_kernel(tmp_path):
    done = run_nbval(
        tmp_path,
        "from companion.core.files import scratch_dir\nwork = scratch_dir('ch99-')",
        "(work / 'model.pt').write_bytes(b'weights')\nprint(work.exists())",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.system_tmp == [], "the kernel's TMPDIR must not be the system's"


def test_a_file_left_in_the_kernels_temporary_folder_fails_the_run(tmp_path):
    done = run_nbval(
        tmp_path,
        "import os, tempfile\nopen(os.path.join(tempfile.gettempdir(), 'stray'), 'w').close()",
    )
    assert done.returncode != 0, done.stdout
    assert "left ['stray'] in its temporary folder" in done.stdout


def test_a_cell_is_held_to_nbvals_limit_not_to_pytest_timeouts():
    """Under two busy processes chapter 2's benchmark cell ran past pytest-timeout's 300 s
    and failed CI; a cell now gets --nbval-cell-timeout (1800 s in the Makefile)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        slow = run_nbval(
            Path(folder), "import time\ntime.sleep(4)", options=("--timeout=2",
            "--nbval-cell-timeout=120"),
        )  # fmt: skip
        assert slow.returncode == 0, slow.stdout + slow.stderr
    with tempfile.TemporaryDirectory() as folder:  # the cell's own limit still holds
        hung = run_nbval(
            Path(folder), "import time\ntime.sleep(30)", options=("--nbval-cell-timeout=3",)
        )
        assert hung.returncode != 0 and "Timeout" in hung.stdout + hung.stderr


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_an_xdist_worker_runs_on_its_own_slice_of_the_cores():
    """``tests/conftest.py`` gives xdist worker ``gwI`` of ``N`` its ``cores // N`` cores
    (at least one), and torch as many threads; a plain pytest run keeps every core."""
    probe = (
        "import json, os, torch; from tests.conftest import _xdist_worker_owns_its_cores; "
        "_xdist_worker_owns_its_cores(); "
        "print(json.dumps([sorted(os.sched_getaffinity(0)), torch.get_num_threads()]))"
    )
    cores = sorted(os.sched_getaffinity(0))
    plain = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    for worker, count, want in (("gw1", len(cores), [cores[1 % len(cores)]]), ("gw0", 1, cores)):
        env = {**plain, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": str(count)}
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env=env,
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        assert json.loads(out) == [want, len(want)], (worker, count, out)
