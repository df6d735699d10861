import inspect

import pytest

from companion import show
from companion.data import DeviceLoader
from companion.train import train_step

pytestmark = pytest.mark.ch1


def test_show_renders_the_real_source_with_its_file():
    src = show(train_step)
    assert repr(src) == "# companion/train.py\n" + inspect.getsource(train_step)
    md = src._repr_markdown_()
    assert md.startswith("```python\n# companion/train.py\ndef train_step(") and md.endswith("```")


def test_show_dedents_methods():
    code = show(DeviceLoader.__iter__).code
    assert code.startswith("def __iter__(self):")


def test_show_rejects_objects_without_source():
    with pytest.raises(TypeError, match="needs a function, class, method or module"):
        show(42)
