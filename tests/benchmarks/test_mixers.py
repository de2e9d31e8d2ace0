"""benchmarks/archive/mixers: the parameter match, the learning-rate rule, the frequency gain and the report."""

from __future__ import annotations

import pytest
import torch
from benchmarks.archive.mixers import mixers


def test_widths_match_the_heat_models_parameters_within_5_percent() -> None:
    target = mixers.mixer_params("heat", 32)
    widths = range(28, 42, 2)
    for mixer in ("identity", "hcl"):
        dims, params = mixers.match_dims(mixer, target, 0.05, widths)
        assert abs(params / target - 1) <= 0.05 and params == mixers.mixer_params(mixer, dims)
    assert mixers.match_dims("attention", target, 0.05, widths)[0] == 32  # the only width that tiles its heads
    with pytest.raises(ValueError, match="within 1%"):
        mixers.match_dims("attention", target, 0.01, widths)


def _results(scores: dict[float, float], **args: str) -> tuple[dict, dict]:
    row = {"name": "heat", "model": mixers.MODEL, "model_args": {"mixer": "heat", "dims": 32, **args}, "params": 1}
    runs = {}
    for lr, top1 in scores.items():
        key = mixers.ablations.train_key(row, 0, mixers.budget_at(lr))
        runs[key] = {"status": "ok", "best_val_top1": top1, "cpu_seconds": 100.0}
    return row, {"runs": runs}


def test_the_rate_rule_best_seed0_top1_ties_to_the_smaller_rate() -> None:
    row, results = _results({2.5e-4: 30.0, 5e-4: 41.0, 1e-3: 41.0})
    assert mixers.chosen_lr(results, row, (2.5e-4, 5e-4, 1e-3)) == 5e-4
    row, results = _results({2.5e-4: 30.0, 5e-4: 41.0})
    assert mixers.chosen_lr(results, row, (2.5e-4, 5e-4, 1e-3)) is None  # not all rates ran


def test_frequency_gain_reads_the_trained_transfer() -> None:
    import timm

    torch.manual_seed(0)
    heat = timm.create_model(mixers.MODEL, mixer="heat", dims=8, depths=(1, 1, 1, 1), num_classes=3)
    with torch.no_grad():  # a large diffusivity everywhere: high frequencies strongly damped
        for m in heat.modules():
            if hasattr(m, "freq_embed") and hasattr(m, "op"):
                m.op.to_k[0].weight.zero_()
                m.op.to_k[0].bias.fill_(1.0)
    assert mixers.frequency_gain(heat) < 0.2
    wave = timm.create_model(mixers.MODEL, mixer="wave", dims=8, depths=(1, 1, 1, 1), num_classes=3)
    assert mixers.frequency_gain(wave) == pytest.approx(1.0, abs=0.05)  # at initialisation t ~ 0: a flat transfer
    assert mixers.frequency_gain(timm.create_model(mixers.MODEL, mixer="pooling", dims=8, num_classes=3)) is None


def test_the_report_of_a_partial_record_says_what_has_not_run() -> None:
    row, results = _results({2.5e-4: 30.0, 5e-4: 41.0, 1e-3: 35.0})
    results["rows"] = [row]
    text = mixers.report(results, (2.5e-4, 5e-4, 1e-3), 3)
    assert "| heat | 32 | 0.000 | 30.0 / 41.0 / 35.0 | 0.0005 | 41.0 ± 0.0 (n=1) | 41.0 | 1/1 |" in text
    key = mixers.ablations.train_key(row, 1, mixers.budget_at(5e-4))
    results["runs"][key] = {"status": "ok", "best_val_top1": 12.0, "cpu_seconds": 100.0}  # a seed that stayed at chance
    text = mixers.report(results, (2.5e-4, 5e-4, 1e-3), 3)
    assert "| 0.0005 | 26.5 ± 20.5 (n=2) | 41.0 / 12.0 | 1/2 |" in text
    assert "| heat vs attention | — | — | not run yet |" in text
    assert "| heat | — | — | — | — | — | — | — |" in text  # no init scale, top-1, ERF, gain or speed measured yet


def test_the_report_pairs_the_patch_stem_runs_with_the_conv_stem_runs() -> None:
    row, results = _results({2.5e-4: 30.0, 5e-4: 41.0, 1e-3: 35.0}, stem="conv")
    patch = {**row, "model_args": {**row["model_args"], "stem": "patch"}}
    results["runs"][mixers.ablations.train_key(patch, 0, mixers.budget_at(1e-3))] = {
        "status": "ok",
        "best_val_top1": 20.0,
    }
    results["rows"] = [row]
    text = mixers.report(results, (2.5e-4, 5e-4, 1e-3), 3)
    assert "| heat | 20.0 | 35.0 | +15.0 |" in text


def test_throughput_measures_each_row_as_the_bench_builds_it() -> None:
    tiny = {"dims": 8, "depths": [1, 1, 1, 1]}
    table = [
        {"name": m, "model": mixers.MODEL, "model_args": {"mixer": m, **tiny}, "params": 1} for m in ("wave", "pooling")
    ]
    out = mixers.throughput(table, batch=2, repeats=1)
    for kind in ("inference", "train"):
        assert set(out[f"{kind}_images_per_s"]) == {"wave", "pooling"}
        assert all(v > 0 for v in out[f"{kind}_images_per_s"].values())
    text = mixers.report({"rows": table, "runs": {}, "bench": out}, (1e-3,), 1)
    speed = out["inference_images_per_s"]["wave"]
    assert f"| wave | — | — | — | — | — | {speed:.0f} |" in text


def test_init_scale_is_one_for_identity_and_small_for_the_spectral_mixers() -> None:
    tiny = {"dims": 8, "depths": [1, 1, 1, 1]}
    row = {"name": "x", "model": mixers.MODEL, "model_args": {"mixer": "identity", **tiny}}
    assert mixers.init_scale(row) == pytest.approx(1.0, abs=1e-6)
    row["model_args"]["mixer"] = "heat"
    assert 0 < mixers.init_scale(row) < 0.05


def test_a_lost_checkpoint_is_trained_again_and_the_report_sets_both_runs_side_by_side(tmp_path) -> None:
    row, results = _results({2.5e-4: 30.0, 5e-4: 41.0, 1e-3: 35.0})
    lrs = (2.5e-4, 5e-4, 1e-3)
    key = mixers.ablations.train_key(row, mixers.ANALYSIS_SEED, mixers.budget_at(5e-4))  # the rate of seed 0's best
    gone = str(tmp_path / "gone")  # the record's folder is not on disk
    results["runs"][key] = {"status": "ok", "best_val_top1": 41.0, "folder": gone, "cpu_seconds": 100.0}
    todo = mixers.lost_runs(results, [row], lrs, tmp_path / "runs")
    assert list(todo) == [key] and todo[key].endswith("-rerun")  # only the chosen rate's run, into a new folder
    again = tmp_path / "again"
    again.mkdir()
    (again / "model.safetensors").write_bytes(b"")
    results["reruns"] = {key: {"status": "ok", "best_val_top1": 39.5, "folder": str(again)}}
    assert mixers.lost_runs(results, [row], lrs, tmp_path / "runs") == {}
    assert mixers._analysis_run(results, key)["folder"] == str(again)
    results["rows"] = [row]
    text = mixers.report(results, lrs, 3)
    assert "## The same run twice" in text and "| heat | 0.0005 | 41.0 | 39.5 | -1.5 |" in text
    assert mixers.ANALYSIS_SEED == 1  # the analysis does not read the seed the rate was chosen on
    (again / "model.safetensors").unlink()  # the copy is gone too: train it again
    assert list(mixers.lost_runs(results, [row], lrs, tmp_path / "runs")) == [key]


def test_a_retraining_that_fails_is_recorded_in_its_section_and_the_others_go_on(tmp_path) -> None:
    row = {"name": "x", "model": "no_such_model", "model_args": {}}
    key = mixers.ablations.train_key(row, 1, {**mixers.budget_at(1e-3), "data": "digits", "epochs": 1})
    results: dict = {"runs": {}}
    mixers._train_all({key: str(tmp_path / "run")}, results, tmp_path / "r.json", 1, section="reruns")
    assert results["reruns"][key]["status"] == "failed" and "no_such_model" in results["reruns"][key]["reason"]
    assert results["runs"] == {}  # the record's own runs are left as they are
