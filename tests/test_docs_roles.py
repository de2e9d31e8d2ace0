"""The API reference renders the docstrings' Sphinx roles as cross-references (docs/sphinx_roles.py, a griffe
extension enabled in mkdocs.yml)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANY_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`")


def _roles() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs" / "sphinx_roles.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _ref(identifier: str, shown: str) -> str:
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'


def test_each_form_of_role_becomes_an_optional_autoref() -> None:
    roles = _roles()
    scope = {"register": "pdevision.tasks.registry.register", "ClassifyConfig": "pdevision.tasks.classify.Config"}
    text = (
        "a :class:`~pdevision.engine.config.RunConfig`, :func:`register`, :meth:`ClassifyConfig.resolved`, "
        ":mod:`pdevision.tasks.registry`, :data:`the recipes <pdevision.data.RECIPES>`, :py:class:`timm.Foo`"
    )

    def resolve(name: str) -> str | None:  # a scope holding two names, as griffe's Object.resolve would answer
        head = name.partition(".")[0]
        return scope[head] + name[len(head) :] if head in scope else None

    out = roles.convert(text, resolve)
    assert out == (
        f"a {_ref('pdevision.engine.config.RunConfig', 'RunConfig')}, "
        f"{_ref('pdevision.tasks.registry.register', 'register()')}, "
        f"{_ref('pdevision.tasks.classify.Config.resolved', 'ClassifyConfig.resolved()')}, "
        f"{_ref('pdevision.tasks.registry', 'pdevision.tasks.registry')}, "
        f"{_ref('pdevision.data.RECIPES', 'the recipes')}, {_ref('timm.Foo', 'timm.Foo')}"
    )


def test_every_role_in_the_sources_is_one_the_extension_converts() -> None:
    roles = _roles()
    files = sorted((ROOT / "src").rglob("*.py"))
    found = sum(len(roles.ROLE.findall(p.read_text())) for p in files)
    left = {str(p.relative_to(ROOT)): ANY_ROLE.findall(roles.convert(p.read_text(), lambda _: None)) for p in files}
    assert found > 300  # the scan sees the roles (381 when written)
    assert {k: v for k, v in left.items() if v} == {}


def test_griffe_loads_the_package_with_every_role_converted_and_short_names_resolved() -> None:
    griffe = pytest.importorskip("griffe")  # the docs extra; not in the test environment
    extensions = griffe.load_extensions(str(ROOT / "docs" / "sphinx_roles.py") + ":SphinxRoles")
    pkg = griffe.load("pdevision", search_paths=[str(ROOT / "src")], extensions=extensions)
    left: list[str] = []

    def walk(obj) -> None:
        if obj.is_alias:
            return
        if obj.docstring is not None and ANY_ROLE.search(obj.docstring.value):
            left.append(obj.path)
        for member in obj.members.values():
            walk(member)

    walk(pkg)
    assert left == []
    doc = pkg["tasks.config_file"].docstring.value
    assert _ref("pdevision.tasks.config_file.RECORDED_ONLY", "RECORDED_ONLY") in doc  # a short name, resolved
