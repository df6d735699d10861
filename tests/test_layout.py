"""The package's floors, read from its imports: no upward import, no cycle, small modules.

core (floor 0) imports nothing of the package but core; runtime (1) only core;
each chapter package imports core, runtime and earlier chapters, never later
ones: the floors follow the table of contents (``_toc.yml``), which a test
holds them to. The command lines join every chapter, in one place: the
``__main__`` modules and ``companion.commands`` (the top). The package's face
(``companion/__init__.py``) only re-exports. The tools (``companion_tools``: the
benchmarks and the pictures drawn from
recorded runs) stand above the whole package: they import it, it never imports them.
"""

import ast
from pathlib import Path

import pytest

import companion
import companion_tools

pytestmark = pytest.mark.book

PACKAGE = Path(companion.__file__).resolve().parent
TOOLS = Path(companion_tools.__file__).resolve().parent
FLOORS = {
    "core": 0,
    "runtime": 1,
    "split": 2,  # chapter 2
    "collectives": 3,  # chapter 3
    "dataparallel": 4,  # chapter 4
    "ddp": 5,  # chapter 5
    "internals": 6,  # chapter 6
    "study": 7,  # chapter 7
    "elastic": 8,  # chapter 8
    "sharding": 9,  # chapter 9
    "slowlinks": 10,  # chapter 10
    "samebits": 11,  # chapter 11
    "troubleshoot": 12,  # the troubleshooting appendix
    "commands": 13,  # the command lines: every chapter
}
# Each chapter's package, in the table of contents' order (the floors must follow it).
CHAPTERS = {
    "ch02": "split",
    "ch03": "collectives",
    "ch04": "dataparallel",
    "ch05": "ddp",
    "ch06": "internals",
    "ch07": "study",
    "ch08": "elastic",
    "ch09": "sharding",
    "ch10": "slowlinks",
    "ch11": "samebits",
    "appendix_troubleshooting": "troubleshoot",
}
MAX_LINES = 300


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The ``companion`` modules ``path`` imports, anywhere in the file (absolute names)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "companion" or target.startswith("companion."):
                found.add(target)
                found |= {
                    f"{target}.{a.name}"
                    for a in node.names
                    if (PACKAGE.parent / f"{target}.{a.name}".replace(".", "/"))
                    .with_suffix(".py")
                    .exists()
                }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("companion")}
    return found - {name}


def tool_imports(path: Path) -> set[str]:
    """The ``companion_tools`` modules that ``path`` imports, however it names them."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == "companion_tools"}
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def floor(name: str) -> int | None:
    parts = name.split(".")
    if parts[-1] == "__main__":  # a command line: it may join every chapter
        return FLOORS["commands"]
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def test_floors_follow_the_table_of_contents():
    toc = (PACKAGE.parent / "_toc.yml").read_text()
    pages = [line.split("book/")[1].strip() for line in toc.splitlines() if "file: book/" in line]
    order = [
        next(p for k, p in CHAPTERS.items() if page.startswith(k))
        for page in pages
        if any(page.startswith(k) for k in CHAPTERS)
    ]
    assert order == list(CHAPTERS.values()), "CHAPTERS must list the chapters in the book's order"
    floors = [FLOORS[package] for package in order]
    assert floors == sorted(floors) and len(set(floors)) == len(floors), (
        f"each chapter's package needs a floor above the chapters before it: {dict(zip(order, floors))}"
    )
    assert max(floors) < FLOORS["commands"] and min(floors) > FLOORS["runtime"]


def test_every_subpackage_has_a_floor():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(FLOORS), "give each subpackage of companion a floor in FLOORS"
    assert {p.name for p in PACKAGE.glob("*.py")} == {"__init__.py"}, "modules live in subpackages"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_go_down(name):
    mine = floor(name)
    if mine is None:  # the package's face
        return
    for target in GRAPH[name]:
        theirs = floor(target)
        assert theirs is not None, (
            f"{name} imports the package's face {target}: import from the module"
        )
        assert theirs <= mine, (
            f"{name} (floor {mine}) imports {target} (floor {theirs}), a higher floor"
        )


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name, path):
        state[name] = 1
        for target in sorted(GRAPH.get(name, ())):
            if target not in GRAPH or target == name.rpartition(".")[0]:
                continue  # a subpackage's modules may be imported through its face
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join(path + [target]))
            if target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_the_taught_package_never_imports_the_tools():
    found = {name: tool_imports(path) for name, path in MODULES.items()}
    assert not {n: t for n, t in found.items() if t}, (
        "companion imports companion_tools: move what a chapter teaches into companion"
    )


def test_the_tool_rule_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("import companion_tools.bench\nfrom companion_tools import x\n")
    assert tool_imports(tmp_path / "a.py") == {"companion_tools.bench", "companion_tools"}


@pytest.mark.parametrize(
    "path",
    sorted([*PACKAGE.rglob("*.py"), *TOOLS.rglob("*.py")]),
    ids=lambda p: str(p.relative_to(PACKAGE.parent)),
)
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path} has {lines} lines: split it by topic (at most {MAX_LINES})"


def test_the_rule_catches_an_upward_import_and_a_cycle(tmp_path):
    """The checks above can fail: an upward import and a cycle, written out, are found."""
    pkg = tmp_path / "companion"
    (pkg / "core").mkdir(parents=True)
    (pkg / "ddp").mkdir()
    (pkg / "core" / "a.py").write_text("from ..ddp.b import x\n")
    (pkg / "ddp" / "b.py").write_text("from ..core.a import y\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        up = imports_of(pkg / "core" / "a.py")
        assert up == {"companion.ddp.b"} and floor("companion.core.a") < floor("companion.ddp.b")
        assert imports_of(pkg / "ddp" / "b.py") == {"companion.core.a"}  # so a -> b -> a
    finally:
        PACKAGE = saved
