"""Scratch folders: gone when the process exits, also after an error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from companion.core import atomic_write, scratch_dir

pytestmark = pytest.mark.ch5

FAILING = """
from companion.core import atomic_write, scratch_dir
path = scratch_dir("ch99-")
(path / "logs").mkdir()
(path / "logs" / "events").write_text("x")
print(path, flush=True)
raise RuntimeError("a cell failed")
"""


def test_a_scratch_folder_is_removed_at_exit_even_after_an_error(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", FAILING],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert run.returncode == 1 and "a cell failed" in run.stderr
    made = Path(run.stdout.strip())
    assert made.parent == tmp_path and made.name.startswith("ch99-")
    assert not made.exists() and list(tmp_path.iterdir()) == []


def test_a_scratch_folder_is_new_and_empty():
    a, b = scratch_dir("ch99-"), scratch_dir("ch99-")
    assert a != b and a.is_dir() and list(a.iterdir()) == []


@pytest.mark.parametrize("prefix", ["", "a/b"])
def test_a_prefix_must_be_a_plain_name(prefix):
    with pytest.raises(ValueError, match="prefix must be a non-empty name"):
        scratch_dir(prefix)


def test_a_written_file_gets_the_mode_the_umask_gives_not_mkstemp_s_0600(tmp_path):
    """Issue 36: results and checkpoints a user writes are readable as their other files are."""
    import os
    import stat

    from companion.core.files import _UMASK

    path = atomic_write(tmp_path / "out.txt", lambda f: f.write(b"x"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~_UMASK
    assert _UMASK == os.umask(_UMASK)  # the import left the process's umask as it was
