"""benchmarks/bench_cpu_perf/reruns.py: ratios of several bench runs side by side, with their spread."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cpu_perf" / "reruns.py"
spec = importlib.util.spec_from_file_location("reruns", SCRIPT)
reruns = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(reruns)  # type: ignore[union-attr]


def _run(folder: Path, ratio: float) -> Path:
    folder.mkdir()
    rows = [{"model": "vheat_tiny", "peer": "convnext_tiny", "img_size": 512, "dtype": "bf16", "ratio": ratio}]
    (folder / "results.json").write_text(json.dumps({"ratios": rows}))
    return folder


def test_spread_over_runs(tmp_path: Path) -> None:
    runs = [_run(tmp_path / f"r{i}", r) for i, r in enumerate((0.96, 1.03, 0.99))]
    md = tmp_path / "out.md"
    assert reruns.main([*map(str, runs), "--names", "a", "b", "c", "--note", "three runs", "--md", str(md)]) == 0
    text = md.read_text()
    assert "three runs" in text
    assert "| vheat_tiny | convnext_tiny | bf16 | 512 | 0.960 | 1.030 | 0.990 | 0.960 | 0.990 | 1.030 |" in text


def test_a_folder_without_a_run_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"reruns: .*results.json is not the results.json"):
        reruns.main([str(tmp_path / "empty"), "--md", str(tmp_path / "o.md")])
    with pytest.raises(SystemExit, match="2 runs but 1 names"):
        reruns.main([str(_run(tmp_path / "x", 1.0)), str(_run(tmp_path / "y", 1.0)), "--names", "a"])
