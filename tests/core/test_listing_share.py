"""How much of ``companion`` the book shows, and how much of what it shows is argument checks.

Issue 36 asks for at least 25% of the package shown and at most 5% check lines in the
listings. Both are measured here on every run and held by a ratchet at today's values, so
that they can only improve; ``python tests/core/test_listing_share.py`` prints them.
Code lines: non-blank, outside docstrings, not comment-only. A check line (an argument
check): a line of a statement that calls a ``check_*`` / ``_check*`` function, or of an
``if`` whose body only raises ``ValueError`` or ``TypeError``, the errors of bad input.
An ``if`` that raises another exception is what the code is for, not a check of its
arguments: a detector's verdict (``DuplicatedWork``), a worker's error passed on
(``ReplicaError``), a failure made on purpose.
"""

import ast
import inspect
import sys
from pathlib import Path

import pytest

import companion

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_listings_in_book import NOTEBOOKS, show_calls  # noqa: E402

pytestmark = pytest.mark.book

PACKAGE = Path(companion.__file__).resolve().parent
SHOWN_AT_LEAST = 0.25  # the aim; measured: run this file
CHECKS_AT_MOST = 0.05  # the aim; measured: run this file


def code_lines(path: Path) -> set[int]:
    src = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    return {
        i
        for i, line in enumerate(src.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#") and i not in docstrings
    }


def _called(node) -> str:
    if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
        func = node.value.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return ""


def _raised(stmt: ast.Raise) -> str:
    f = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return getattr(f, "id", getattr(f, "attr", ""))


def is_check(stmt: ast.stmt) -> bool:
    if _called(stmt).startswith(("check_", "_check")):
        return True
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and all(isinstance(s, ast.Raise) for s in stmt.body)
        and all(_raised(s) in ("ValueError", "TypeError") for s in stmt.body)
    )


def shown_lines() -> dict[Path, set[int]]:
    """File -> the line numbers of every object a notebook shows with ``show()``."""
    shown: dict[Path, set[int]] = {}
    for nb in NOTEBOOKS:
        imports, calls = show_calls(nb)
        namespace: dict = {}
        exec(compile(ast.Module(body=imports, type_ignores=[]), str(nb), "exec"), namespace)
        for call in calls:
            target = inspect.unwrap(eval(ast.unparse(call.args[0]), namespace))
            path = Path(inspect.getsourcefile(target)).resolve()
            if inspect.ismodule(target):
                first, n = 1, len(path.read_text().splitlines())
            else:
                source, first = inspect.getsourcelines(target)
                n = len(source)
            shown.setdefault(path, set()).update(range(first, first + n))
    return shown


def measure() -> tuple[int, int, int]:
    """``(package code lines, shown code lines, check lines among the shown)``."""
    shown, total, seen, checks = shown_lines(), 0, 0, 0
    for path in PACKAGE.rglob("*.py"):
        code = code_lines(path)
        total += len(code)
        mine = code & shown.get(path, set())
        seen += len(mine)
        for node in ast.walk(ast.parse(path.read_text())):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)  # an IfExp's body is one expression
                for stmt in stmts if isinstance(stmts, list) else []:
                    if is_check(stmt):
                        checks += len(mine & set(range(stmt.lineno, stmt.end_lineno + 1)))
    return total, seen, checks


def test_the_share_shown_and_the_share_of_checks_only_improve():
    total, seen, checks = measure()
    assert seen / total >= SHOWN_AT_LEAST, f"the book shows {seen} of {total} code lines"
    assert checks / seen <= CHECKS_AT_MOST, f"{checks} of {seen} shown lines are checks"


if __name__ == "__main__":
    total, seen, checks = measure()
    print(f"shown: {seen} of {total} code lines ({seen / total:.1%})")
    print(f"checks: {checks} of the shown lines ({checks / seen:.1%})")
