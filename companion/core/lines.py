"""Whole lines from processes that share one pipe.

Used in: chapters 3, 5, 6, 8 and appendix A (every worker that prints).

``print(text, flush=True)`` writes the text and the ``"\\n"`` in two calls
when Python runs unbuffered (``PYTHONUNBUFFERED=1`` or ``python -u``, the
default of many CI systems and containers). Workers that share torchrun's
stdout pipe then interleave: ``step 30 loss 2.0004rank 1: killed ...``.
:func:`say` builds the whole line first and hands it to the stream in one
``write``; the operating system keeps a pipe write of up to 4096 bytes whole.
"""

from __future__ import annotations

import sys
from typing import IO

__all__ = ["say"]


def say(*parts: object, sep: str = " ", file: IO[str] | None = None) -> None:
    """Print one line, text and newline in a single ``write``, then flush."""
    stream = sys.stdout if file is None else file
    stream.write(sep.join(str(p) for p in parts) + "\n")
    stream.flush()
