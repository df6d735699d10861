"""Sphinx extension of the book: the API reference of ``companion``, one directive per subpackage.

``book/appendix_api.md`` holds one ``companion-package`` directive per
subpackage; each expands, at build time, into a section with the package's
docstring and, for each of its modules (found by ``pkgutil``, so a new
module needs no edit), a subsection with ``automodule`` and its members.
References to the package's own names resolve by their short name when it
is unique (``Record`` finds ``companion.core.results.Record``), as they read
in the docstrings; anything else that does not resolve stays a warning.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def package_modules(package: str) -> list[str]:
    """The public modules of ``package`` (not ``__main__`` nor ``_private``), in file order."""
    found = importlib.import_module(package)
    names = [m.name for m in pkgutil.iter_modules(found.__path__) if not m.name.startswith("_")]
    return [f"{package}.{name}" for name in names]


def public_data(module: str) -> list[str]:
    """Names in ``module.__all__`` that are data (not functions, classes or modules).

    autodoc's ``:members:`` documents module data only when it has a ``#:``
    comment; the others get a ``py:data`` entry of their own (:func:`_data`).
    """
    found = importlib.import_module(module)
    commented = {
        name for scope, name in ModuleAnalyzer.for_module(module).find_attr_docs() if not scope
    }
    return [
        name
        for name in getattr(found, "__all__", [])
        if name not in commented
        and not (callable(getattr(found, name)) or inspect.ismodule(getattr(found, name)))
    ]


def _automodule(module: str, members: bool) -> list[str]:
    """``automodule`` in reStructuredText (docstrings are reST), wrapped for a MyST page."""
    rst = [f".. automodule:: {module}"]
    if members:
        rst += ["   :members:", "   :undoc-members:", ""]
        for name in public_data(module):
            rst += _data(module, name)
    return ["```{eval-rst}", *rst, "```", ""]


def _assigned(module: str, name: str) -> str | None:
    """The source of the expression assigned to ``name`` at the top of ``module``, if found."""
    found = importlib.import_module(module)
    source = inspect.getsource(found)
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value:
            return ast.get_source_segment(source, node.value)
    return None


def _data(module: str, name: str) -> list[str]:
    """A ``py:data`` entry for ``module.name``: its definition as written, or its keys."""
    value = getattr(importlib.import_module(module), name)
    written = _assigned(module, name)
    written = " ".join(written.split()).replace("( ", "(").replace(" )", ")") if written else ""
    if written and len(written) <= 120:
        text = f"``{name} = {written}``"
    elif isinstance(value, dict):
        text = "A ``dict`` with the keys " + ", ".join(f"``{k!r}``" for k in value) + "."
    else:
        text = f"A ``{type(value).__name__}``; see the module's source."
    return [f".. py:data:: {name}", f"   :module: {module}", "", f"   {text}", ""]


class CompanionPackage(SphinxDirective):
    """The package and all its modules; written in a MyST page as ``{companion-package}``."""

    required_arguments = 1

    def _section(self, title: str, rst: list[str]) -> nodes.section:
        section = nodes.section(ids=[nodes.make_id(f"api-{title}")], names=[f"api {title}"])
        section += nodes.title(text=title)
        nested_parse_with_titles(
            self.state, StringList(rst, source=self.get_source_info()[0]), section
        )
        return section

    def run(self) -> list[nodes.Node]:
        package = self.arguments[0]
        section = self._section(package, _automodule(package, members=False))
        for module in package_modules(package):
            section += self._section(module, _automodule(module, members=True))
        return [section]


def resolve_short_names(app, env, node, contnode):
    """A ``py`` reference to a short name of ``companion`` that is unique: resolve it there."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "").lstrip("~.")
    if not target or target.startswith("companion."):
        return None
    domain = env.get_domain("py")
    matches = [
        name
        for name in domain.objects
        if name.startswith("companion.") and name.endswith("." + target)
    ]
    if len(set(matches)) != 1:
        return None
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode
    )


def setup(app):
    app.add_directive("companion-package", CompanionPackage)
    app.connect("missing-reference", resolve_short_names)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
