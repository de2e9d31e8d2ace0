"""The command-line reference page and the recorded top-level help are what the parser says now, and the console
script answers ``pdevision --help`` without importing torch."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _all_flags() -> set[str]:
    """Every option string of every command and subcommand, for every task's train / eval / predict."""
    from pdevision.cli import build_parser
    from pdevision.tasks import tasks

    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            elif not isinstance(action, argparse._HelpAction):
                found.update(action.option_strings)

    for task in tasks():
        walk(build_parser(train_task=task, checkpoint_task=task))
    return found


def test_the_reference_page_and_the_recorded_help_are_current() -> None:
    gen = _generator()
    fix = "run: python docs/cli_reference.py"
    assert gen.PAGE.read_text(encoding="utf-8") == gen.reference_page(), fix
    assert gen.HELP.read_text(encoding="utf-8") == gen.top_level_help(), fix


def test_the_reference_page_names_every_flag() -> None:
    page = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    flags = _all_flags()
    assert {"--json-out", "--config", "--macs", "--corruptions", "--method"} <= flags  # the walk finds them
    assert sorted(f for f in flags if f"`{f}`" not in page) == []


def _launch(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]])
def test_the_console_script_answers_help_without_importing_torch(argv: list[str]) -> None:
    out = _launch(
        "import sys, _pdevision_cli\n"
        f"code = _pdevision_cli.main({argv!r})\n"
        "heavy = sorted(m for m in ('torch', 'timm', 'numpy', 'pdevision') if m in sys.modules)\n"
        "print('imported:', heavy, code, file=sys.stderr)\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "imported: [] 0"
    assert out.stdout == (ROOT / "src" / "pdevision" / "cli_help.txt").read_text(encoding="utf-8")
    assert "predict" in out.stdout and "train" in out.stdout


def test_the_console_script_hands_every_other_command_to_the_cli() -> None:
    out = _launch("import sys, _pdevision_cli\nsys.exit(_pdevision_cli.main(['models', 'vheat_mi*']))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:3] == [
        "| model | params (M) | released weights (`pretrained=True`) |",
        "|---|---:|---|",
        "| vheat_micro | 2.12 | - |",
    ]
    out = _launch("import sys, _pdevision_cli\nsys.exit(_pdevision_cli.main(['models', '--img-size', '64']))")
    assert out.returncode == 2 and "goes with --macs" in out.stderr


def test_the_console_script_entry_point_is_the_launcher() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["pdevision"] == "_pdevision_cli:main"
    assert "_pdevision_cli" in project["tool"]["setuptools"]["py-modules"]
    assert "cli_help.txt" in project["tool"]["setuptools"]["package-data"]["pdevision"]
