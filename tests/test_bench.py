"""The benchmark harness runs end to end on small settings and writes every output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdevision.bench.operators import fit_exponent
from pdevision.cli import main


def test_fit_exponent_recovers_power_law() -> None:
    tokens = [196, 784, 3136, 12544]
    assert fit_exponent(tokens, [1e-6 * t**1.5 for t in tokens]) == pytest.approx(1.5)


def test_bench_cli_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "--models", "vheat_micro", "resnet18", "--resolutions", "64", "--batch", "2"]
    argv += ["--repeats", "2", "--train-resolutions", "64", "--operator-sides", "8", "16", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    rows = {r["model"]: r for r in result["rows"]}
    assert set(rows) == {"vheat_micro", "resnet18"}
    for row in rows.values():
        assert row["infer_img_s"] > 0 and row["train_img_s"] > 0 and row["peak_mem_mib"] >= 0
        assert 0 < row["fraction_of_matmul"] < 5
    assert rows["vheat_micro"]["params_m"] == pytest.approx(2.12, abs=0.01)
    assert result["machine"]["matmul_gflops"] > 0
    ops = result["operators"]
    assert {"hco_matrix", "hco_fft", "global_attention", "window_attention_7x7"} == set(ops["exponents"])
    for name in ("results.csv", "results.md", "cost_vs_resolution.png", "operators.png"):
        assert (out / name).stat().st_size > 100
    assert "| vheat_micro | 64 | 2 |" in capsys.readouterr().out


def test_bench_unknown_model_is_clear(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--models", "vheat_tinyy"]) == 2
    assert "did you mean vheat_tiny" in capsys.readouterr().err
