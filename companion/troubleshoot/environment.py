"""Environment variables for one run, and a worker's own stderr, captured.

Used in: the troubleshooting appendix.

Most distributed settings are environment variables, read when a process
imports ``torch.distributed`` or starts a group (``TORCH_DISTRIBUTED_DEBUG``,
``GLOO_SOCKET_IFNAME``, ``NCCL_DEBUG``). :func:`~companion.runtime.launcher.launch` hands its workers
a copy of the launcher's environment, so setting a variable around one
``launch`` call is enough: :func:`temporary_env`.

The C++ side of ``torch.distributed`` writes its logs straight to file
descriptor 2, below Python's ``sys.stderr``. :func:`captured_stderr` catches
them in a worker, so that a demonstration can *return* what a reader would
see in the terminal instead of spilling it into a notebook.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["temporary_env", "Captured", "captured_stderr", "masked"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@contextmanager
def temporary_env(**variables: str | None) -> Iterator[None]:
    """Set (a string) or unset (``None``) environment variables inside a ``with`` block.

    Every variable gets its previous value back afterwards, also on an error.
    """
    _check_variables(variables)
    saved = {name: os.environ.get(name) for name in variables}
    try:
        for name, value in variables.items():
            _set(name, value)
        yield
    finally:
        for name, value in saved.items():
            _set(name, value)


def _check_variables(variables: dict) -> None:
    for name, value in variables.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"{name} must be a string or None (to unset it), got "
                f"{type(value).__name__}: write {name}={str(value)!r}"
            )


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class Captured:
    """What was written to file descriptor 2 inside :func:`captured_stderr`: ``text``."""

    def __init__(self) -> None:
        self.text = ""


@contextmanager
def captured_stderr(path: str | None = None) -> Iterator[Captured]:
    """Redirect this process's file descriptor 2 (C++ logs included) into ``.text``.

    With ``path``, the text is also in that file, where another process can
    read it even if this one is killed inside the block.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    captured = Captured()
    sink_file = open(path, "w+b") if path else tempfile.TemporaryFile(mode="w+b")
    with sink_file as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace")


_VARYING = [
    (re.compile(r"(\[[\d.:a-fA-F]+\]):\d+"), r"\1:PORT"),  # peer address and port
    (re.compile(r"\[([EWI])\d{4} \d\d:\d\d:\d\d\.\d+ "), r"[\1<time> "),  # C++ log stamp
    (re.compile(r"port: \d+"), "port: PORT"),
]


def masked(text: str) -> str:
    """``text`` with what changes from run to run (ports, log times) replaced by a name."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (a run's output), got {type(text).__name__}")
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return text
