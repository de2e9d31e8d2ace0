"""benchmarks/dense_sizes: backbones alone at non-square sizes, timed and probed, on a tiny setting."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from benchmarks.dense_sizes import dense_sizes


@pytest.mark.slow
def test_tiny_run_times_and_probes_each_backbone(tmp_path: Path) -> None:
    md = tmp_path / "d.md"
    argv = ["--models", "vheat_micro", "convnext_atto", "--sizes", "64x96", "--batches", "1", "--repeats", "1"]
    assert dense_sizes.main([*argv, "--threads", "1", "--md", str(md)]) == 0
    rows = json.loads(md.with_suffix(".json").read_text())["rows"]  # the record: its command, machine, rows
    assert {(r["model"], r["dtype"]) for r in rows} == {
        (m, d) for m in ("vheat_micro", "convnext_atto") for d in ("fp32", "bf16")
    }
    assert all(r["size"] == "64x96" and r["ms"] > 0 and r["peak_mib"] >= 0 for r in rows)
    text = md.read_text()
    assert "| 64x96 | 1 | fp32 | vheat_micro |" in text and "| 1.00 |" in text  # the reference model's own ratio


def test_sizes_are_height_by_width_and_checked() -> None:
    assert dense_sizes.parse_size("800x1280") == (800, 1280)
    for bad in ("800", "8x1280", "axb"):
        with pytest.raises(argparse.ArgumentTypeError, match="a size"):
            dense_sizes.parse_size(bad)


def test_an_unknown_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"dense_sizes: .*vheat_tinyy"):
        dense_sizes.main(["--models", "vheat_tinyy", "--sizes", "64x64", "--md", str(tmp_path / "d.md")])


@pytest.mark.parametrize("flag", ["--batches", "--repeats", "--threads"])
def test_a_count_that_is_not_positive_is_an_argparse_error(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, ``--repeats 0`` ended in a traceback and ``--batches 0`` wrote a record of empty batches."""
    with pytest.raises(SystemExit) as exc:
        dense_sizes.main([flag, "0"])
    assert exc.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
