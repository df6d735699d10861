"""One epoch loop per kind: chapter 3's worker and every later trainer run `train_epochs`."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.ch3

PACKAGE = Path(__file__).resolve().parents[2] / "companion"


def epoch_loops() -> set[str]:
    """Every function with a ``for`` loop whose body calls chapter 1's ``train_epoch``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
                calls = [c.func for c in ast.walk(loop) if isinstance(c, ast.Call)]
                if any(getattr(f, "id", getattr(f, "attr", None)) == "train_epoch" for f in calls):
                    found.add(f"{module}.{fn.name}")
    return found


def test_there_is_one_epoch_loop_per_kind():
    assert epoch_loops() == {
        "core.training.fit",  # one device (chapters 1, 2 and 4 extend it)
        "runtime.epochs.train_epochs",  # one process per device (chapters 3, 5, 6, 8, 9)
        # Chapter 5's mistakes break the loop's rules on purpose (no set_epoch, no sampler).
        "ddp.mistakes.train_with_mistake",
    }
