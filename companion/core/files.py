"""Atomic writes (a file is replaced whole or not at all) and scratch folders.

Used in: every chapter that saves something (results, checkpoints).

The bytes go to a hidden temporary file in the same directory, are flushed
to disk, and ``os.replace`` renames it over the target in one step. A crash
or an error mid-write leaves the previous file whole; temporary files that a
killed writer could not remove are cleaned up by the next write.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "scratch_dir"]

_TMP_SUFFIX = ".tmp"
_UMASK = os.umask(0o022)  # read once, at import: the process's umask, then set back
os.umask(_UMASK)


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a directory; give a file name, e.g. {path / 'model.pt'}"
        )
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(
                f"cannot write {path}: {parent} is a file, not a directory; "
                f"choose a path whose parent folders are directories"
            )


def atomic_write(path: str | Path, write: Callable[[IO], None], binary: bool = True) -> Path:
    """Call ``write(f)`` on a temporary file, then rename it over ``path``.

    Returns the path. If ``write`` fails, the temporary file is removed and
    ``path`` is untouched.
    """
    path = Path(path)
    _check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the file from the group
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def scratch_dir(prefix: str) -> Path:
    """A new temporary folder, removed with everything in it when the process exits.

    For a notebook's work files (checkpoints, logs, results): the kernel's exit
    removes them even when a cell failed before the chapter's end.
    """
    if not prefix or os.sep in prefix:
        raise ValueError(f"prefix must be a non-empty name without {os.sep!r}, got {prefix!r}")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
