"""benchmarks/authors_vheat: without the authors' code it says what is missing, in one line; the report states
what was compared. (The comparison itself needs a clone of the authors' repository, which is not bundled.)"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from benchmarks.authors_vheat import authors_vheat


def test_a_folder_without_the_authors_code_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="must be the root of a clone of MzeroMiko/vHeat"):
        authors_vheat.main(["--authors-code", str(tmp_path)])


def test_report_names_both_sides_and_the_logit_check() -> None:
    rows = [
        {"img_size": 768, "batch": 1, "dtype": "fp32", "authors_img_s": 1.0, "pdevision_img_s": 2.5, "ratio": 2.5,
         "max_logit_diff": 7.6e-7},
    ]  # fmt: skip
    md = authors_vheat.write_report(rows, argparse.Namespace(repeats=5), "bcc4da7", 12.0)
    assert "| 768 | 1 | fp32 | 1.00 | 2.50 | 2.50x | 7.6e-07 |" in md
    assert "MzeroMiko/vHeat at commit bcc4da7" in md and "checkpoint_filter_fn" in md


@pytest.mark.parametrize(
    ("flag", "value", "message"), [("--repeats", "0", "positive integer"), ("--sizes", "8", r"\[32, 16384\]")]
)
def test_counts_and_sizes_out_of_range_are_argparse_errors(
    flag: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        authors_vheat.main(["--authors-code", str(tmp_path), flag, value])
    assert exc.value.code == 2
    assert re.search(message, capsys.readouterr().err)
