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


def _without_docstrings(code: str) -> str:
    """``code`` minus the docstrings of its module, classes and functions.

    A docstring that is the whole body of a function or class becomes
    ``...``, so the listing stays valid Python; the blank line that follows a
    class's docstring goes with it.
    """
    drop: dict[int, str] = {}  # line number -> what replaces it ("" drops it)
    lines = code.splitlines(keepends=True)
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                drop.update(dict.fromkeys(range(first.lineno, first.end_lineno + 1), ""))
                if len(node.body) == 1 and not isinstance(node, ast.Module):
                    drop[first.lineno] = " " * first.col_offset + "...\n"
                elif isinstance(node, ast.ClassDef) and not lines[first.end_lineno].strip():
                    drop[first.end_lineno + 1] = ""  # the blank line after a class docstring
    return "".join(drop.get(i, line) for i, line in enumerate(lines, 1))


def show(obj, docstrings: bool = False) -> Source:
    """Return the source of a function, class, method or module of the package.

    ``show(companion.core.training.train_step)`` in a cell displays the code
    exactly as it is in the installed package, headed by the file it comes
    from. Docstrings are left out (they are in the API reference) unless
    ``docstrings=True``.
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
    return Source(code if docstrings else _without_docstrings(code), origin)
