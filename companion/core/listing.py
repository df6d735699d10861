"""``show(obj)``: the real source of a ``companion`` object, rendered in a notebook.

Used in: every chapter. The book never retypes package code: it shows it.
The listing is plain text fixed by the source, so nbval fails as soon as the
package changes and the notebook has not been re-run.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

__all__ = ["Source", "show"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding companion/


class Source:
    """Source code that renders as a highlighted listing (Markdown) or plain text."""

    def __init__(self, code: str, origin: str):
        self.code, self.origin = code, origin

    def __repr__(self) -> str:
        return f"# {self.origin}\n{self.code}"

    def _repr_markdown_(self) -> str:
        return f"```python\n# {self.origin}\n{self.code}```"


def _summaries_only(code: str) -> str:
    """``code`` with each docstring cut to its summary, the first paragraph.

    The rest of a docstring (the details, in the API reference) is left out,
    together with the blank line that ended the summary; a one-paragraph
    docstring stays whole. Nothing else changes: the listing is the code as it runs.
    """
    drop: set[int] = set()  # line numbers left out
    ends: dict[int, str] = {}  # line number -> the summary's last line, closed
    lines = code.splitlines(keepends=True)
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if not (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                continue
            span = range(first.lineno, first.end_lineno + 1)
            blank = next((i for i in span if not lines[i - 1].strip()), None)
            if blank is None:
                continue  # one paragraph: the summary is the whole docstring
            quote = lines[first.lineno - 1].lstrip()[:3]
            quote = quote if quote in ('"""', "'''") else '"""'
            last = lines[blank - 2].rstrip()
            indent = " " * (len(last) - len(last.lstrip()))
            fits = len(last) + len(quote) <= 100  # the listing's width, as ruff's
            ends[blank - 1] = last + (quote if fits else "\n" + indent + quote) + "\n"
            drop.update(range(blank, first.end_lineno + 1))
    return "".join(ends.get(i, line) for i, line in enumerate(lines, 1) if i not in drop)


def show(obj, docstrings: bool = False) -> Source:
    """Return the source of a function, class, method or module of the package.

    ``show(companion.core.training.train_step)`` in a cell displays the code
    exactly as it is in the installed package, headed by the file it comes
    from. Each docstring is cut to its summary (the whole one is in the API
    reference) unless ``docstrings=True``.
    """
    target = inspect.unwrap(obj)
    try:
        code = inspect.getsource(target)
        path = Path(inspect.getsourcefile(target)).resolve()
    except (TypeError, OSError) as err:
        raise TypeError(
            f"show() needs a function, class, method or module with Python source, "
            f"got {type(obj).__name__}: {err}"
        ) from err
    try:
        origin = path.relative_to(_PACKAGE_ROOT).as_posix()
    except ValueError:
        origin = path.name
    if code.startswith((" ", "\t")):
        code = inspect.cleandoc("\n" + code) + "\n"
    return Source(code if docstrings else _summaries_only(code), origin)
