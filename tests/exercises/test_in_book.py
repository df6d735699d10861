"""Every chapter's exercises end with a checker, run in the chapter on its own code (which
passes), and every checker is named by a chapter."""

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

import companion_tools.exercises as exercises

pytestmark = pytest.mark.book

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = sorted(BOOK.glob("ch[0-9][0-9]_*.ipynb"))


def _after_exercises(path: Path) -> list[dict]:
    """The cells from the ``## Exercises`` heading up to the next ``## `` heading."""
    cells = json.loads(path.read_text())["cells"]
    start = next(
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and re.search(r"^## Exercises", "".join(c["source"]), re.M)
    )
    out = [cells[start]]
    for cell in cells[start + 1 :]:
        if cell["cell_type"] == "markdown" and "".join(cell["source"]).startswith("## "):
            break
        out.append(cell)
    return out


def _checkers() -> set[str]:
    names = set()
    for info in pkgutil.iter_modules(exercises.__path__):
        module = importlib.import_module(f"{exercises.__name__}.{info.name}")
        names |= {n for n in getattr(module, "__all__", []) if n.startswith("check_")}
    return names


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_exercises_end_with_a_checker_that_passes_on_the_chapter_s_code(path):
    code = [c for c in _after_exercises(path) if c["cell_type"] == "code"]
    runs = [c for c in code if "companion_tools.exercises" in "".join(c["source"])]
    assert len(runs) == 1, f"{path.name}: want one checker cell after '## Exercises'"
    calls = {
        node.func.id
        for node in ast.walk(ast.parse("".join(runs[0]["source"])))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert calls & _checkers(), f"{path.name}: the cell calls no checker ({sorted(calls)})"
    text = "".join(o.get("text", "") for o in runs[0]["outputs"])
    assert re.search(r": True\b", text) and not re.search(r": False\b", text), text


def test_every_checker_is_named_by_a_chapter():
    words = " ".join("".join(c["source"]) for path in CHAPTERS for c in _after_exercises(path))
    assert not sorted(n for n in _checkers() if n not in words)
