"""The API reference (book/appendix_api.md) covers every subpackage, and the build can expand it."""

import importlib
import re
import sys
from pathlib import Path

import pytest

import companion

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "appendix_api.md"
PACKAGE = Path(companion.__file__).resolve().parent
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def listed() -> list[str]:
    return re.findall(
        r"^```\{companion-package\}\s+companion\.(\w+)\s*$", PAGE.read_text(), re.MULTILINE
    )


@pytest.fixture
def extension():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        yield importlib.import_module("companion_api")
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))


def test_every_subpackage_is_on_the_api_page_once():
    names = listed()
    missing = sorted(set(SUBPACKAGES) - set(names))
    assert not missing, (
        f"add a line '```{{companion-package}} companion.<name>' to {PAGE.name} for {missing}"
    )
    assert len(names) == len(set(names)), "a subpackage is listed twice"
    assert set(names) <= set(SUBPACKAGES), "the page lists a subpackage that does not exist"


def test_the_page_is_in_the_table_of_contents_and_the_extension_is_configured():
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert {"file": "book/appendix_api"} in toc["chapters"]
    sphinx = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]
    assert "sphinx.ext.autodoc" in sphinx["extra_extensions"]
    assert sphinx["local_extensions"] == {"companion_api": "book/_ext"}


def test_each_package_expands_to_all_its_modules(extension):
    for name in SUBPACKAGES:
        modules = extension.package_modules(f"companion.{name}")
        on_disk = sorted(
            f"companion.{name}.{p.stem}"
            for p in (PACKAGE / name).glob("*.py")
            if not p.stem.startswith("_")
        )
        assert sorted(modules) == on_disk


def test_module_data_in_all_gets_an_entry_of_its_own(extension):
    # autodoc skips module data without a #: comment; the extension lists it.
    assert "KINDS" in extension.public_data("companion.troubleshoot.hangs")
    assert "diagnose_hang" not in extension.public_data("companion.troubleshoot.hangs")
    entry = "\n".join(extension._data("companion.troubleshoot.hangs", "KINDS"))
    assert ".. py:data:: KINDS" in entry and "``'skip'``" in entry
    entry = "\n".join(extension._data("companion.runtime.group", "MASTER_ADDR"))
    assert '``MASTER_ADDR = "127.0.0.1"``' in entry  # as written in the module
