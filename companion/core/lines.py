"""Whole lines from processes that share one pipe.

Used in: chapters 3, 5, 6, 8 and appendix A (every worker that prints); chapter 1 (bars).

``print(text, flush=True)`` writes the text and the ``"\\n"`` in two calls
when Python runs unbuffered (``PYTHONUNBUFFERED=1`` or ``python -u``, the
default of many CI systems and containers). Workers that share torchrun's
stdout pipe then interleave: ``step 30 loss 2.0004rank 1: killed ...``.
:func:`say` builds the whole line first and hands it to the stream in one
``write``; the operating system keeps a pipe write of up to 4096 bytes whole.
:func:`progress_bar` draws a bar on a terminal only, never in a notebook.
:func:`shell_lines` breaks a long command into lines a shell reads as one.
:func:`number_of` writes a count with its noun: "1 process", "2 processes".
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import IO

__all__ = ["say", "progress_bar", "shell_lines", "number_of"]


def say(*parts: object, sep: str = " ", file: IO[str] | None = None) -> None:
    """Print one line, text and newline in a single ``write``, then flush."""
    stream = sys.stdout if file is None else file
    stream.write(sep.join(str(p) for p in parts) + "\n")
    stream.flush()


@contextmanager
def progress_bar(total: int, desc: str, show: bool | None = None) -> Iterator:
    """A tqdm bar on stderr, only on a terminal command line; else one that draws nothing.

    ``show=None``: a bar when stderr is a terminal and the code does not run
    inside IPython/Jupyter, under every profile, so notebook outputs never
    hold one. ``True``/``False`` force it on or off.
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise TypeError(f"total must be an integer >= 0, got {total!r}: the number of steps")
    if show is None:
        show = sys.stderr.isatty() and "IPython" not in sys.modules
    if not show:
        yield SimpleNamespace(update=lambda n=1: None)
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, leave=False) as bar:
        yield bar


def shell_lines(command: str, width: int = 88) -> str:
    """``command`` broken between words into lines of at most ``width`` characters, each
    but the last ending with `` \\`` (a shell joins them), the later ones indented."""
    if type(width) is not int or width < 20:  # a line must hold a word and " \\"
        raise ValueError(
            f"width must be an integer >= 20, got {width!r}: the characters a line may hold"
        )
    lines = textwrap.wrap(
        command, width - 2, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )
    return " \\\n".join(lines)


def number_of(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``"1 process"``, ``"2 processes"``."""
    if n == 1:
        return f"1 {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{n:g} {plural}"
