import ast
import inspect

import pytest

from companion import show
from companion.core.listing import _summaries_only
from companion.core.loaders import DeviceLoader
from companion.core.training import train_step

pytestmark = pytest.mark.ch1


def test_show_renders_the_real_source_with_its_file_and_docstring_on_request():
    src = show(train_step, docstrings=True)
    assert repr(src) == "# companion/core/training.py\n" + inspect.getsource(train_step)
    md = src._repr_markdown_()
    assert md.startswith(
        "```python\n# companion/core/training.py\ndef train_step("
    ) and md.endswith("```")


def _strip_docstring_nodes(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:]
    return ast.dump(tree)


def _docstrings(tree: ast.AST) -> list[str]:
    return [
        node.body[0].value.value
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    ]


@pytest.mark.parametrize("obj", [DeviceLoader, train_step, show])
def test_show_cuts_docstrings_to_their_summaries_and_changes_nothing_else(obj):
    full = inspect.getsource(obj)
    code = show(obj).code
    assert code.count("\n") < full.count("\n")
    # each docstring is its first paragraph, word for word
    summaries = [d.split("\n\n")[0].rstrip() for d in _docstrings(ast.parse(full))]
    assert [d.rstrip() for d in _docstrings(ast.parse(code))] == summaries
    # and the program around them is the same
    assert _strip_docstring_nodes(ast.parse(code)) == _strip_docstring_nodes(ast.parse(full))


def test_summaries_only_keeps_strings_that_are_not_docstrings_and_short_docstrings():
    code = 'def f():\n    """Doc."""\n    x = """not a docstring"""\n    return x\n'
    assert _summaries_only(code) == code
    code = 'def f():\n    """Doc.\n\n    More.\n    """\n    return 1\n'
    assert _summaries_only(code) == 'def f():\n    """Doc."""\n    return 1\n'


def test_show_dedents_methods():
    code = show(DeviceLoader.__iter__).code
    assert code.startswith("def __iter__(self):")


def test_show_rejects_objects_without_source():
    with pytest.raises(TypeError, match="needs a function, class, method or module"):
        show(42)


def test_a_class_whose_docstring_is_cut_still_parses():
    code = 'class A:\n    def f(self) -> None:\n        """Only a docstring.\n\n        More.\n        """\n\n    def g(self):\n        return 1\n'
    shown = _summaries_only(code)
    assert shown == (
        'class A:\n    def f(self) -> None:\n        """Only a docstring."""\n\n'
        "    def g(self):\n        return 1\n"
    )
    ast.parse(shown)


def test_no_shown_body_is_empty():
    from companion.internals.steps import StepBookkeeping

    code = show(StepBookkeeping).code
    ast.parse(code)  # an empty body would be a syntax error
    assert 'def _prepare(self) -> None:\n        """' in code
