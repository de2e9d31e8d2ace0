"""Griffe extension for the API reference: the docstrings' Sphinx roles
(``:class:`~pdevision.engine.config.RunConfig```, ``:func:`register```, ``:meth:`ClassifyConfig.resolved```) become
cross-references that mkdocs-autorefs links.

mkdocstrings-python reads Google-style docstrings and shows Sphinx roles as raw text. Each role is rewritten into
an optional autoref (``<autoref identifier="..." optional>``, the element mkdocstrings' own handlers emit): a link
where the target is rendered on some page of the site, plain code where it is not (a private helper, another
library), so ``mkdocs build --strict`` has nothing to warn about. A short name is resolved in the scope of the
object whose docstring holds it (its members, its module's imports, its parents), as Sphinx would; ``~`` shows only
the last component, ``title <target>`` shows ``title``. The docstrings in the source stay as they are (Python's
``help()`` and IDEs show the roles as written).

Enabled in ``mkdocs.yml`` (``extensions: [docs/sphinx_roles.py:SphinxRoles]`` under the Python handler's options).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|mod|attr|data|exc|obj|const|type):`(?P<body>[^`]+)`",
)


def _target(body: str) -> tuple[str, str]:
    """``(shown text, target)`` of a role's body: ``~a.b.C`` -> (C, a.b.C), ``title <a.b>`` -> (title, a.b)."""
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>", body.strip())
    if explicit:
        return explicit["title"], explicit["target"].lstrip("~.")
    target = body.strip()
    short = target.startswith("~")
    target = target.lstrip("~.")
    return (target.rsplit(".", 1)[-1] if short else target), target


def convert(text: str, resolve: Callable[[str], str | None]) -> str:
    """``text`` with each Sphinx role replaced by an optional autoref; ``resolve`` maps a name as written (``C`` or
    ``C.method``) to its full path, or ``None`` where it cannot (the name is then taken as written)."""

    def replace(match: re.Match[str]) -> str:
        shown, target = _target(match["body"])
        full = resolve(target) or target
        title = shown + ("()" if match["role"] in ("func", "meth") and not shown.endswith(")") else "")
        return f'<autoref identifier="{html.escape(full)}" optional><code>{html.escape(title)}</code></autoref>'

    return ROLE.sub(replace, text)


def scope_resolver(obj: Any) -> Callable[[str], str | None]:
    """Names resolved as griffe resolves them in ``obj``'s scope (``Object.resolve``), component by component."""

    def resolve(name: str) -> str | None:
        if name.startswith("pdevision."):
            return name
        head, _, rest = name.partition(".")
        try:
            full = obj.resolve(head)
        except Exception:  # griffe's NameResolutionError, or an object without a scope: taken as written
            return None
        return f"{full}.{rest}" if rest else full

    return resolve


try:  # the docs extra installs griffe (through mkdocstrings-python); the tests import this file without it
    import griffe
except ModuleNotFoundError:  # pragma: no cover - the docs build has griffe
    griffe = None


def convert_tree(obj: Any) -> None:
    """Convert the docstrings of ``obj`` and of all its members (aliases left to their targets)."""
    if getattr(obj, "is_alias", False):
        return
    if obj.docstring is not None and ROLE.search(obj.docstring.value):
        obj.docstring.value = convert(obj.docstring.value, scope_resolver(obj))
    for member in list(obj.members.values()):
        convert_tree(member)


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """Sphinx roles in docstrings as optional cross-references (see the module's docstring), once a package is
        loaded, so that names resolve against all of it (griffe 1.x calls one of these hooks; the second finds no
        role left)."""

        def on_package_loaded(self, *, pkg: Any, **kwargs: Any) -> None:
            convert_tree(pkg)

        def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
            convert_tree(pkg)
