"""benchmarks/ablations.py: row checks, resume keys, the report's statistics and verdicts, a tiny run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ablations.py"
spec = importlib.util.spec_from_file_location("ablations", SCRIPT)
ablations = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(ablations)  # type: ignore[union-attr]

BUDGET = {"data": "scenes", "epochs": 2, "batch_size": 8, "img_size": 32, "recipe": "light", "max_train_batches": 1}


def test_rows_are_data_and_rejected_arguments_are_reported() -> None:
    for name, group in ablations.GROUPS.items():
        assert group["title"] and group["claim"], name
        for row in group["rows"]:
            assert {"name", "model", "model_args"} <= set(row)
    assert ablations.check_row({"model": "hcnet_micro", "model_args": {"k_mode": "fixed"}}, 64) is None
    reason = ablations.check_row({"model": "vheat_micro", "model_args": {"no_such_arg": 1}}, 64)
    assert reason is not None and "no_such_arg" in reason


def test_train_key_defines_a_run() -> None:
    row = {"name": "x", "model": "vheat_micro", "model_args": {"a": 1}, "eval_args": {"fve_resize": "pad"}}
    key = ablations.train_key(row, 0, BUDGET)
    assert key == ablations.train_key({**row, "name": "y", "eval_args": {}}, 0, BUDGET)  # eval-only args shared
    assert key != ablations.train_key(row, 1, BUDGET)
    assert key != ablations.train_key(row, 0, {**BUDGET, "epochs": 3})


def test_report_statistics_and_verdicts() -> None:
    group = {"title": "t", "claim": "c", "expected": ["a", "b", "c"], "rows": []}
    means = {"a": 70.0, "b": 60.0, "c": 65.0}
    stds = {"a": 1.0, "b": 1.0, "c": 6.0}
    text = ablations._verdict("g", group, means, stds)
    assert "Reproduced: a vs b" in text and "Reversed: none" in text
    assert "Within noise: a vs c, b vs c" in text
    text = ablations._verdict("g", {**group, "expected": ["b", "a"]}, means, stds)
    assert "Reversed: b vs a" in text
    m, s, n = ablations._stats([70.0, 72.0, 74.0])
    assert (m, s, n) == (72.0, 2.0, 3)
    assert ablations._fmt([70.0, 72.0, 74.0]) == "72.0 ± 2.0 (n=3)"


@pytest.mark.slow
def test_tiny_run_resumes_and_writes_the_report(tmp_path: Path) -> None:
    args = [
        "--rows", "hcnet_filter", "--seeds", "1", "--epochs", "1", "--batch-size", "8", "--img-size", "32",
        "--max-train-batches", "1", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
        "--json", str(tmp_path / "a.json"), "--md", str(tmp_path / "a.md"),
    ]  # fmt: skip
    assert ablations.main(args) == 0
    runs = json.loads((tmp_path / "a.json").read_text())["runs"]
    assert len(runs) == 2 and all(r["status"] == "ok" for r in runs.values())
    md = (tmp_path / "a.md").read_text()
    assert "RA filter on" in md and "RA filter off" in md and "What reproduces" in md
    stamp = {k: r["seconds"] for k, r in runs.items()}
    assert ablations.main(args) == 0  # resume: nothing retrained
    again = json.loads((tmp_path / "a.json").read_text())["runs"]
    assert {k: r["seconds"] for k, r in again.items()} == stamp
