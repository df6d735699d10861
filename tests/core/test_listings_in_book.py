"""Every ``show(...)`` a notebook calls renders at most 50 lines of valid Python, its
``# companion/...`` header included: the listing shows the idea, and instrumentation lives
beside it (CONTRIBUTING.md)."""

import ast
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
MAX_LINES = 50


def show_calls(nb_path: Path) -> tuple[list[ast.stmt], list[ast.Call]]:
    """The notebook's import statements and its ``show(...)`` calls, from the code cells."""
    imports, calls = [], []
    for cell in json.loads(nb_path.read_text())["cells"]:
        source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        imports += [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        calls += [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "show"
        ]
    return imports, calls


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_listing_the_book_shows_fits_in_50_lines(nb_path):
    imports, calls = show_calls(nb_path)
    namespace: dict = {}
    exec(compile(ast.Module(body=imports, type_ignores=[]), str(nb_path), "exec"), namespace)
    too_long = {}
    for call in calls:
        text = ast.unparse(call)
        source = eval(compile(ast.Expression(call), text, "eval"), namespace)
        ast.parse(source.code)  # valid Python: no body left empty
        shown = repr(source).splitlines()  # the "# companion/..." header line counts too
        assert shown[0] == f"# {source.origin}" and shown[1:] == source.code.splitlines()
        if len(shown) > MAX_LINES:
            too_long[text] = len(shown)
    assert not too_long, f"listings over {MAX_LINES} lines in {nb_path.name}: {too_long}"
