"""benchmarks/optimizer_step: one AdamW step in three forms, on tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.optimizer_step import optimizer_step


def test_tiny_run_times_each_form(tmp_path: Path) -> None:
    md = tmp_path / "o.md"
    assert optimizer_step.main(["--models", "vheat_micro", "convnext_atto", "--rounds", "1", "--md", str(md)]) == 0
    rows = [line for line in md.read_text().splitlines() if line.startswith(("| vheat_micro", "| convnext_atto"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert int(cells[1]) > 0 and all(float(c) > 0 for c in cells[3:6]) and cells[6].endswith("x")


def test_an_unknown_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"optimizer_step: unknown model\(s\) vheat_tinyy"):
        optimizer_step.main(["--models", "vheat_tinyy", "--md", str(tmp_path / "o.md")])


def test_a_count_that_is_not_positive_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        optimizer_step.main(["--rounds", "0"])
    assert exc.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
