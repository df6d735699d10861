"""The book's conventions, checked from the files: config, table of contents, notebooks."""

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

import companion

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files(node) -> list[str]:
    files = [node["file"]] if "file" in node else []
    for key in ("chapters", "parts", "sections"):
        for child in node.get(key, []):
            files += toc_files(child)
    if "root" in node:
        files.append(node["root"])
    return files


def load(nb_path: Path) -> dict:
    return json.loads(nb_path.read_text())


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_config_builds_from_committed_outputs_with_colab_buttons():
    assert CONFIG["execute"]["execute_notebooks"] == "off"
    assert (
        CONFIG["execute"]["timeout"] > 0 and CONFIG["sphinx"]["config"]["nb_execution_timeout"] > 0
    )
    assert CONFIG["only_build_toc_files"] is True
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", CONFIG["repository"]["url"])
    assert CONFIG["repository"]["path_to_book"] == ""  # notebooks' repo paths are their toc paths
    for excluded in ("_build", "tests", "companion", ".venv"):
        assert excluded in CONFIG["exclude_patterns"]


def test_every_toc_entry_exists_and_every_chapter_is_listed():
    listed = toc_files(TOC)
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md")), entry
    for nb in NOTEBOOKS:
        assert nb.relative_to(ROOT).with_suffix("").as_posix() in listed, (
            f"{nb.name} is not in _toc.yml"
        )


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_installs_companion_in_colab_from_the_configured_repo(nb_path):
    first = code_cells(load(nb_path))[0]
    src = "".join(first["source"])
    assert 'if "google.colab" in sys.modules:' in src
    assert f'"companion @ git+{CONFIG["repository"]["url"]}"' in src
    assert "remove-cell" in first["metadata"].get("tags", [])


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_committed_fresh_and_clean(nb_path):
    cells = code_cells(load(nb_path))
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        "re-run the whole notebook with BOOK_PROFILE=ci"
    )
    for cell in cells:
        for out in cell["outputs"]:
            assert out["output_type"] != "error", "".join(cell["source"])
            if out.get("name") == "stderr":
                pytest.fail(
                    f"stderr in committed output (warnings break nbval): {''.join(out['text'])[:200]}"
                )


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_an_id(nb_path):
    """nbformat 4.5: a cell added by hand without an id warns under nbval now (CI19 showed a
    MissingIDFieldWarning for one) and will be an error in later nbformat versions."""
    missing = [i for i, cell in enumerate(load(nb_path)["cells"]) if "id" not in cell]
    assert not missing, f"cells without an id: {missing}: give each one (nbformat's normalize)"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_show_package_code_instead_of_retyping_it(nb_path):
    package_names = set()
    for f in Path(companion.__file__).parent.rglob("*.py"):
        tree = ast.parse(f.read_text())
        package_names |= {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        }
    for cell in code_cells(load(nb_path)):
        for name in re.findall(r"^\s*(?:def|class)\s+(\w+)", "".join(cell["source"]), re.M):
            assert name not in package_names, f"{nb_path.name} redefines companion's {name}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_ignored_outputs_give_a_reason_in_metadata_not_in_the_code(nb_path):
    """nbval skips a cell's output by tag; the reason sits in the cell's metadata, out of sight."""
    for cell in code_cells(load(nb_path)):
        src = "".join(cell["source"])
        assert "NBVAL_IGNORE_OUTPUT" not in src, "use the nbval-ignore-output tag, not a comment"
        if "nbval-ignore-output" in cell["metadata"].get("tags", []):
            reason = cell["metadata"].get("nbval-ignore-reason", "")
            assert len(reason) > 10, f"say why this output may vary: {src[:80]}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_long_inputs_and_outputs_are_folded_on_the_page(nb_path):
    """A code cell over 50 lines (the import cells) is folded (tag hide-input), and so is an
    output over 50 lines (chapter 8's YAML manifests, tag hide-output): a reader scrolls past
    neither. Listings from show() are kept under 50 lines by test_listings_in_book.py."""
    for i, cell in enumerate(code_cells(load(nb_path))):
        tags = cell.get("metadata", {}).get("tags", [])
        if len("".join(cell["source"]).splitlines()) > 50:
            assert "hide-input" in tags, f"cell {i}: over 50 lines of code, not folded"
        for out in cell.get("outputs", []):
            if len("".join(out.get("text", "")).splitlines()) > 50:
                assert "hide-output" in tags, f"cell {i}: an output over 50 lines, not folded"


# The code column at 1280 px shows about 103 characters whole (book/_static/custom.css; measured
# with a ruler line in headless Chromium). Lines wider than WIDTH would scroll sideways: no
# page has one (tables fit, commands break with shell_lines, long errors are wrapped).
# KNOWN_WIDE would count a page's exceptions; there are none.
WIDTH = 100
KNOWN_WIDE: dict[str, int] = {}


def shown_lines(cell: dict) -> list[str]:
    """The lines a reader sees unfolded: code, printed text, and listings (text/plain)."""
    tags = cell.get("metadata", {}).get("tags", [])
    lines = [] if "hide-input" in tags else "".join(cell["source"]).splitlines()
    if "hide-output" not in tags:
        for out in cell.get("outputs", []):
            lines += "".join(out.get("text", "")).splitlines()
            data = out.get("data", {})
            if "text/plain" in data and "image/png" not in data:
                lines += "".join(data["text/plain"]).splitlines()
    return lines


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_new_line_is_wider_than_the_code_column(nb_path):
    wide = [
        (i, len(line))
        for i, cell in enumerate(code_cells(load(nb_path)))
        for line in shown_lines(cell)
        if len(line) > WIDTH
    ]
    known = KNOWN_WIDE.get(nb_path.stem, 0)
    assert len(wide) <= known, f"lines over {WIDTH} characters (code cell number, length): {wide}"
    assert len(wide) == known, f"only {len(wide)} wide lines left: lower KNOWN_WIDE to that"


def test_chapter_9_launches_under_the_package_s_backend_rule():
    """No cell of chapter 9 names a backend: each launch takes backend_for's (issue 37), or
    the profile's process plan, which is that rule unless one GPU sends every run to gloo."""
    nb = load(ROOT / "book" / "ch09_sharded_data_parallel.ipynb")
    named = [
        i
        for i, c in enumerate(code_cells(nb))
        if re.search(
            r"backend=(?!profile\.processes\.backend\b|processes\.backend\b)", "".join(c["source"])
        )
    ]
    assert not named, f"code cells {named} of chapter 9 pass backend=: leave it to launch"


def test_nbval_sanitises_only_float64_rounding_gaps_among_numbers():
    """The gap between two float64 results at rounding level ("3e-17") depends on the CPU;
    nbval compares it as "<1e-15". A gap of 1e-15 or more, and every other number, stays."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parent / "nbval_sanitize.cfg")
    section = cfg["float64 rounding gaps"]
    clean = lambda text: re.sub(section["regex"], section["replace"], text)  # noqa: E731
    assert (
        clean("mean 3e-17, fp16 1e-05, 5e-20, 2.5e-16") == "mean <1e-15, fp16 1e-05, <1e-15, <1e-15"
    )
    assert (
        clean("gap 2e-15, 1e-06, 0e+00, 61,706 parameters")
        == "gap 2e-15, 1e-06, 0e+00, 61,706 parameters"
    )


PACKAGE_PATH = re.compile(r"\b((?:tests|companion)/[\w/.-]+\.py)\b")


def test_every_file_the_prose_names_exists():
    """A path such as ``tests/split/test_naive.py`` in a chapter, the preface or the README
    is a file of this repository (the prose once cited test files that had moved)."""
    pages = [*(ROOT / "book").glob("*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    texts = {p.name: p.read_text() for p in pages}
    for nb_path in NOTEBOOKS:
        texts[nb_path.name] = "\n".join(
            "".join(c["source"]) for c in load(nb_path)["cells"] if c["cell_type"] == "markdown"
        )
    named = {(page, path) for page, text in texts.items() for path in PACKAGE_PATH.findall(text)}
    assert len(named) > 10  # the pattern finds the paths the pages do name
    missing = sorted((page, path) for page, path in named if not (ROOT / path).is_file())
    assert not missing, f"pages name files that do not exist (page, path): {missing}"


CHAPTER_FILES = {int(p.name[2:4]): p.name for p in NOTEBOOKS if p.name.startswith("ch")}
BARE_CHAPTER = re.compile(r"(?<![\[\w/])\b[Cc]hapter (\d+)\b(?!\]\()")


def prose_lines(nb_path: Path):
    """(cell number, line) of the markdown cells, code spans blanked."""
    for i, cell in enumerate(load(nb_path)["cells"]):
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                yield i, re.sub(r"`[^`]*`", "``", line)


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_wrapped_line_never_starts_with_a_number_and_a_full_stop(nb_path):
    """Markdown reads an indented "1. Both ..." inside a bullet as a new numbered list
    (chapter 10's summary once rendered "lr" and a list starting at 1)."""
    bad = [(i, line) for i, line in prose_lines(nb_path) if re.match(r"^ +\d+\.\s", line)]
    assert not bad, f"reflow these lines (cell, line): {bad}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_other_chapter_named_in_the_prose_is_a_link(nb_path):
    own = int(nb_path.name[2:4]) if nb_path.name.startswith("ch") else None
    bare = [
        (i, line.strip()[:80])
        for i, line in prose_lines(nb_path)
        if not line.lstrip().startswith("#")  # headings stay plain
        for m in BARE_CHAPTER.finditer(line)
        if int(m.group(1)) != own and int(m.group(1)) in CHAPTER_FILES
    ]
    assert not bare, f"link these, e.g. [chapter 5](ch05_ddp.ipynb) (cell, line): {bare}"
