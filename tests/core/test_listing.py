import ast
import inspect

import pytest

from companion import show
from companion.core.listing import _without_docstrings
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


@pytest.mark.parametrize("obj", [DeviceLoader, train_step, show])
def test_show_leaves_out_docstrings_by_default_and_nothing_else(obj):
    full = inspect.getsource(obj)
    code = show(obj).code
    assert '"""' not in code and code.count("\n") < full.count("\n")
    # the same program as the source with its docstring nodes removed from the syntax tree
    assert ast.dump(ast.parse(code)) == _strip_docstring_nodes(ast.parse(full))


def test_without_docstrings_keeps_strings_that_are_not_docstrings():
    code = 'def f():\n    """Doc."""\n    x = """not a docstring"""\n    return x\n'
    assert _without_docstrings(code) == 'def f():\n    x = """not a docstring"""\n    return x\n'


def test_show_dedents_methods():
    code = show(DeviceLoader.__iter__).code
    assert code.startswith("def __iter__(self):")


def test_show_rejects_objects_without_source():
    with pytest.raises(TypeError, match="needs a function, class, method or module"):
        show(42)


def test_a_docstring_that_is_the_whole_body_becomes_an_ellipsis_so_the_listing_parses():
    code = 'class A:\n    def f(self) -> None:\n        """Only a docstring."""\n\n    def g(self):\n        return 1\n'
    shown = _without_docstrings(code)
    assert (
        shown
        == "class A:\n    def f(self) -> None:\n        ...\n\n    def g(self):\n        return 1\n"
    )
    ast.parse(shown)


def test_no_shown_body_is_empty():
    from companion.internals.steps import StepBookkeeping

    code = show(StepBookkeeping).code
    ast.parse(code)  # an empty body would be a syntax error
    assert "def _prepare(self) -> None:\n        ...\n" in code
