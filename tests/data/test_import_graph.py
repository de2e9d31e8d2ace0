"""The data package's own import graph: every import of a ``pdevision`` module at module top, no cycle,
nothing from the layers above (engine, tasks, viz, cli)."""

from __future__ import annotations

import ast
from pathlib import Path

import pdevision.data

DATA = Path(pdevision.data.__file__).parent
ABOVE = ("pdevision.engine", "pdevision.tasks", "pdevision.viz", "pdevision.cli", "pdevision.bench")


def _imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """``(module, line, at module top)`` of every ``pdevision`` import in ``tree``."""
    top = {id(node) for node in getattr(tree, "body", [])}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pdevision"):
            found.append((node.module, node.lineno, id(node) in top))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top) for a in node.names if a.name.startswith("pdevision")]
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(DATA.glob("*.py")):
        name = f"pdevision.data.{path.stem}" if path.stem != "__init__" else "pdevision.data"
        graph[name] = set()
        for module, line, at_top in _imports(ast.parse(path.read_text())):
            assert at_top, f"{path.name}:{line} imports {module} inside a function or block"
            assert not module.startswith(ABOVE), f"{path.name}:{line} imports {module} from a layer above data"
            if module.startswith("pdevision.data.") or module == "pdevision.data":
                graph[name].add(module)
    return graph


def test_data_imports_are_at_module_top_and_acyclic() -> None:
    graph = _graph()
    assert "pdevision.data.errors" in graph and "pdevision.data.imageio" in graph
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, "import cycle: " + " -> ".join([*path[path.index(node) :], node])
        if node in done:
            return
        for dep in sorted(graph.get(node, ())):
            visit(dep, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    # nothing below the package imports the package itself (its __init__ imports them all)
    assert all("pdevision.data" not in deps for name, deps in graph.items() if name != "pdevision.data")
