"""benchmarks/training_step: one training step in three forms, on tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.training_step import training_step


def test_tiny_run_times_each_form(tmp_path: Path) -> None:
    md = tmp_path / "t.md"
    argv = ["--models", "vheat_micro", "--rounds", "1", "--batch", "2", "--img-size", "32", "--threads", "1"]
    assert training_step.main([*argv, "--md", str(md)]) == 0
    rows = [line for line in md.read_text().splitlines() if line.startswith("| vheat_micro")]
    assert [r.split("|")[2].strip() for r in rows] == ["fp32", "bf16"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells[2:5]) and cells[5].endswith("x")


def test_an_unknown_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"training_step: unknown model\(s\) vheat_tinyy"):
        training_step.main(["--models", "vheat_tinyy", "--md", str(tmp_path / "t.md")])


def test_a_count_that_is_not_positive_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        training_step.main(["--batch", "-1"])
    assert exc.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
