"""The ``pdevision`` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pdevision.cli import main


def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "models" in out


def test_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--img-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "| vheat_micro | 2.12 |" in out
    assert "vheat_base" in out


def test_demo_runs_on_a_real_photo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "vheat_micro"]) == 0
    out = capsys.readouterr().out
    assert "| vheat_tiny | 30.85 | 4.56 |" in out  # the paper's 4.6 GFLOPs (fvcore counts MACs)
    assert "finite: True" in out
    assert "(300, 451)" in out  # chelsea at its own, non-square size


def test_unknown_photo_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--photo", "nope"]) == 2
    assert "no sample photo 'nope'" in capsys.readouterr().err


def test_console_script_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pdevision.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("pdevision ")
