"""The tests mirror ``src/pdevision`` (the rule is in CONTRIBUTING.md): every folder of tests/ names a package of
the library or one of the groups outside it, is a package, and each test file in a package's folder uses that
package (directly, through timm's registry, or through the command). And every test checks something."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "src" / "pdevision"
# folders that mirror nothing in src/pdevision: the scripts of benchmarks/, and reference-recording scripts
OUTSIDE = {"benchmarks": "benchmarks/ scripts", "fixtures": "recorded references and the scripts that made them"}


def _folders(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*") if p.is_dir() and "__pycache__" not in p.parts)


def _mirrored(folder: Path, tests: Path) -> bool:
    return folder.relative_to(tests).parts[0] not in OUTSIDE


def _imported(path: Path) -> tuple[set[str], str]:
    text = path.read_text()
    modules: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules, text


def _stray(tests: Path) -> list[str]:
    """Folders of tests/ with no package of that name in src/pdevision."""
    folders = [f.relative_to(tests) for f in _folders(tests) if _mirrored(f, tests)]
    return [str(f) for f in folders if not (PACKAGE / f).is_dir()]


def test_every_test_folder_names_a_package_of_the_library_or_a_group_outside_it() -> None:
    assert _stray(TESTS) == []


def test_every_test_folder_is_a_package() -> None:
    """Test files of the same name in two folders (tests/models/test_timm_contract.py and
    tests/benchmarks/test_timm_contract.py) import apart only as packages."""
    missing = [
        str(f.relative_to(TESTS)) for f in _folders(TESTS) if _mirrored(f, TESTS) and not (f / "__init__.py").is_file()
    ]
    assert missing == []


def _misplaced(tests: Path) -> list[str]:
    """Test files in a package's folder that import the library but nothing of that package."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        if not folder.parts or not _mirrored(path.parent, tests):
            continue
        package = ".".join(("pdevision", *folder.parts))
        modules, text = _imported(path)
        library = {m for m in modules if m == "pdevision" or m.startswith("pdevision.")}
        uses_package = any(m == package or m.startswith(package + ".") for m in library)
        through_timm = "pdevision" in library  # `import pdevision` registers the models: tests that go through timm
        through_command = "pdevision.cli" in text or "tests.helpers.exit_code" in modules
        if library and not (uses_package or through_timm or through_command):
            found.append(f"{path.relative_to(tests)} tests {sorted(library)}, nothing of {package}")
    return found


def test_each_test_file_uses_the_package_of_its_folder() -> None:
    assert _misplaced(TESTS) == []


def test_the_checks_find_a_misplaced_file_and_a_stray_folder(tmp_path: Path) -> None:
    """A test of data.shards under tests/engine (where one sat before the layout was made uniform) is found, and a
    folder named after no package (tests/ssl, an earlier name of tasks/pretrain) is found."""
    shards = "import pdevision.data.shards\n"
    for folder in ("engine", "data", "ssl", "benchmarks/study"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test_shards.py").write_text(shards)
    assert _misplaced(tmp_path) == [
        "engine/test_shards.py tests ['pdevision.data.shards'], nothing of pdevision.engine",
        "ssl/test_shards.py tests ['pdevision.data.shards'], nothing of pdevision.ssl",
    ]
    assert _stray(tmp_path) == ["ssl"]


# calls that check: pytest's, numpy's and torch's comparisons, a library check that raises, a helper of the tests
CHECKS = ("raises", "fail", "warns", "approx", "assert_close", "assert_allclose", "assert_array_equal")


def _checks(test: ast.FunctionDef) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Raise) and "AssertionError" in ast.unparse(node):
            return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in CHECKS or name.startswith(("_", "check", "assert")):
                return True
    return False


def _unchecked(tests: Path) -> list[str]:
    """Test functions with no assert, no pytest check and no call of a checking helper."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and not _checks(node):
                found.append(f"{path.relative_to(tests)}::{node.name}")
    return found


def test_every_test_checks_something(tmp_path: Path) -> None:
    assert _unchecked(TESTS) == []
    (tmp_path / "test_x.py").write_text("def test_runs():\n    run()\n\n\ndef test_checks():\n    assert run()\n")
    assert _unchecked(tmp_path) == ["test_x.py::test_runs"]
