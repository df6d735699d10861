"""``show(obj)``: the real source of a ``companion`` object, rendered in a notebook.

Used in: every chapter. The book never retypes package code: it shows it.
The listing is plain text fixed by the source, so nbval fails as soon as the
package changes and the notebook has not been re-run.
"""

from __future__ import annotations

import inspect
from pathlib import Path

__all__ = ["Source", "show"]

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class Source:
    """Source code that renders as a highlighted listing (Markdown) or plain text."""

    def __init__(self, code: str, origin: str):
        self.code, self.origin = code, origin

    def __repr__(self) -> str:
        return f"# {self.origin}\n{self.code}"

    def _repr_markdown_(self) -> str:
        return f"```python\n# {self.origin}\n{self.code}```"


def show(obj) -> Source:
    """Return the source of a function, class, method or module of the package.

    ``show(companion.train.train_step)`` in a cell displays the code exactly as
    it is in the installed package, headed by the file it comes from.
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
    return Source(
        inspect.cleandoc("\n" + code) + "\n" if code.startswith((" ", "\t")) else code,
        origin,
    )
