"""benchmarks/restoration: equal-parameter sizing, step budgets and the report's statistics."""

from __future__ import annotations

import numpy as np
from benchmarks.restoration import restoration as bench

from pdevision.models.restoration import count_trainable_params, create_restoration_model


def test_nets_are_sized_within_two_percent_of_vheatir() -> None:
    args = bench.net_args(32)
    params = {
        arch: count_trainable_params(create_restoration_model(f"{arch}_micro", 1, model_args=args[arch]))
        for arch in bench.NETS
    }
    for arch in ("dncnn", "swinir"):
        assert abs(params[arch] / params["vheatir"] - 1) < 0.02, (arch, params)


def _record(psnrs: dict[str, list[float]]) -> dict:
    runs = {
        arch: {str(s): {"psnr": p, "ssim": p / 40, "params": 1000, "run_cpu_s": 1.0, "run_wall_s": 2.0}
               for s, p in enumerate(values)}
        for arch, values in psnrs.items()
    }  # fmt: skip
    base = {k: {"psnr": v, "ssim": v / 40} for k, v in (("noisy", 20.0), ("nlm", 29.0), ("bm3d", 30.0))}
    return {
        "args": {"budget_seconds": 25.0, "patch_size": 32, "batch_size": 16, "lr": 2e-3, "seeds": [0, 1, 2],
                 "eval_crop": 256},
        "timing": {"rounds": 7, "steps_per_round": 4, "batch_size": 16, "patch_size": 32, "load_average": [5.0],
                   "cpu_s_per_step": dict.fromkeys(bench.NETS, 0.1), "wall_s_per_step": dict.fromkeys(bench.NETS, 0.3)},
        "steps": dict.fromkeys(bench.NETS, 250),
        "net_args": {"dncnn": {"depth": 8, "width": 49}, "swinir": {"embed_dim": 46, "num_heads": 2}},
        "fve_params": 65536,
        "results": {"sigma25": {"runs": runs, "baselines": base}},
    }  # fmt: skip


def test_report_gives_mean_and_sample_std_and_marks_partial_cells() -> None:
    text = bench.markdown(_record({"vheatir": [30.0, 30.2, 30.4], "dncnn": [30.9, 31.0, 31.1], "swinir": [28.0, 28.5]}),
                          None)  # fmt: skip
    row = next(line for line in text.splitlines() if line.startswith("| sigma25 |") and "±" in line)
    assert f"30.20 ± {np.std([30.0, 30.2, 30.4], ddof=1):.2f}" in row
    assert "28.25 ± 0.35 (n=2)" in row  # a seed missing: the cell says so
    assert "dncnn (+0.80 dB over vheatir)" in row  # lead 0.8 > 2 x the larger std 0.2: no caveat
    close = bench.markdown(_record({"vheatir": [30.0, 31.0, 32.0], "dncnn": [30.5, 31.0, 31.5], "swinir": [20.0]}),
                           None)  # fmt: skip
    assert "within 2 std" in close
