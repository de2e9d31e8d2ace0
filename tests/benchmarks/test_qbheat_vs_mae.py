"""benchmarks/qbheat_vs_mae: the report's statistics from a results file (no training)."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.qbheat_vs_mae import qbheat_vs_mae as bench


def _row(lp: float, knn: float, ft: float) -> dict[str, float]:
    return {"lp": lp, "knn": knn, "ft": ft, "lp_cpu_s": 1.0, "ft_cpu_s": 2.0}


def test_report_means_stds_paired_differences_and_chance_level(tmp_path: Path) -> None:
    evals = {arm: {"0": _row(10.0, 10.0, 10.0), "1": _row(11.0, 10.0, 9.0)} for arm, *_ in bench.ARMS}
    evals["qbheat_vit"] = {"0": _row(30.0, 10.0, 10.0), "1": _row(34.0, 10.0, 12.0)}
    state = {
        "settings": {"seeds": [0, 1], "budget_cpu_s": 20, "ft_epochs": 1, "ft_batches": 2, "lp_train": 100},
        "evals": evals,
        "pretrain": {},
        "timing": {},
    }
    out = tmp_path / "report.md"
    bench.write_report(out, tmp_path / "none.png", state, tmp_path / "state.json")
    text = out.read_text()
    sd = statistics.stdev([30.0, 34.0])
    assert f"| QB-Heat | ViT | 2 | 32.0 ± {sd:.1f} | 10.0 ± 0.0 | 11.0 ± 1.4 |" in text
    # paired per-seed differences against MAE: (30 - 10, 34 - 11) = (20, 23)
    assert f"linear probe +21.5 ± {statistics.stdev([20.0, 23.0]):.1f}" in text
    assert "QB-Heat ViT linear probe (32.0)" in text and "MAE ViT linear probe" not in text  # above chance
    assert "none.png" not in text  # no figure, no link
    assert bench.mean_std([]) == "—" and bench.mean_std([12.0]) == "12.0"
