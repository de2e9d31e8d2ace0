"""The command's exit codes: the user's input is a ``UsageError`` (exit 2, one line); any other exception, a
``ValueError`` from library code included, is the library's fault: exit 1, one line and how to see the traceback
(``PDEVISION_TRACEBACK=1``), which then shows."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pdevision.cli import main
from pdevision.engine.config import RunConfig
from pdevision.errors import UsageError
from pdevision.ops.dct import dct_matrix
from pdevision.tasks.registry import TaskCommands, register, unregister

ROOT = Path(__file__).resolve().parents[1]


class FaultyCommands(TaskCommands):
    """A task whose run calls the library wrongly (a bug of the code, not of the user's input)."""

    name = "faulty"
    help = "calls dct_matrix with a size of 0"

    def config(self, args: argparse.Namespace, run: RunConfig) -> RunConfig:
        return run

    def run(self, config: Any) -> dict[str, Any]:
        dct_matrix(0)  # the library's ValueError
        return {}


@pytest.fixture
def faulty() -> Any:
    register(FaultyCommands())
    yield
    unregister("faulty")


def test_a_value_error_of_library_code_exits_1_with_the_hint(
    faulty: None, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PDEVISION_TRACEBACK", raising=False)
    assert main(["train", "--task", "faulty"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith("pdevision train: failed: ValueError: ") and "set PDEVISION_TRACEBACK=1" in err, err


def test_the_hint_s_switch_shows_the_traceback() -> None:
    code = (
        "import sys\n"
        "from tests.test_cli_errors import FaultyCommands\n"
        "from pdevision.cli import main\n"
        "from pdevision.tasks.registry import register\n"
        "register(FaultyCommands())\n"
        "sys.exit(main(['train', '--task', 'faulty']))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "PDEVISION_TRACEBACK": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 1, out.stderr
    assert "Traceback (most recent call last)" in out.stderr and "dct_matrix" in out.stderr, out.stderr


def test_a_usage_error_exits_2_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert issubclass(UsageError, ValueError)  # callers of the library that catch ValueError still catch it
    assert main(["models", "nosuchmodel*"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("pdevision models: error: "), err
