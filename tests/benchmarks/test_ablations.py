"""benchmarks/ablations: row checks, resume keys, the report's statistics and verdicts, a tiny run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmarks.ablations import ablations

BUDGET = {
    "data": "scenes",
    "epochs": 2,
    "batch_size": 8,
    "img_size": 32,
    "recipe": "light",
    "lr": None,
    "opt": None,
    "max_train_batches": 1,
}


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
    assert key != ablations.train_key(row, 0, {**BUDGET, "lr": 2e-3})  # the lr is part of the budget
    args = ablations.argparse.Namespace(**{**BUDGET, "lr": 2e-3, "opt": "sgd"})
    assert ablations.budget_of(args) == {**BUDGET, "lr": 2e-3, "opt": "sgd"}


def test_shared_baselines_train_once() -> None:
    """The default model of a family is one training, shared by every group that holds it."""
    keys: dict[str, set[str]] = {}
    for group in ablations.GROUPS.values():
        for row in group["rows"]:
            if not row["model_args"]:
                keys.setdefault(row["model"], set()).add(ablations.train_key(row, 0, BUDGET))
    assert {m: len(k) for m, k in keys.items() if m.endswith("_micro")} == {
        "vheat_micro": 1,
        "hcnet_library_micro": 1,
        "hcnet_paper_micro": 1,
        "pderesnet_micro": 1,
    }
    rows = ablations.GROUPS["pderesnet"]["rows"]
    assert [r["model_args"].get("table1_row", "eq3_softball@ds") for r in rows] == list(
        ablations.PDERESNET_TABLE1.values()
    )
    from pdevision.models.pderesnet import TABLE1_ROWS

    assert set(ablations.PDERESNET_TABLE1.values()) == set(TABLE1_ROWS)  # every Table 1 row, once


def test_resolution_rows_evaluate_at_multiples_of_the_training_size() -> None:
    row = ablations.GROUPS["vheat_resolution"]["rows"][0]
    assert ablations.eval_sizes(row, 32) == [32, 48, 64]
    assert ablations.eval_sizes(row, 64) == [64, 96, 128]
    key = json.loads(ablations.eval_key(row, 1, BUDGET))
    assert key["sizes"] == [32, 48, 64] and key["train"] == ablations.train_key(row, 1, BUDGET)


def test_two_invocations_share_one_json(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    first, second = ablations.load_results(path), ablations.load_results(path)  # both loaded before any save
    first["runs"]["k1"] = {"status": "ok"}
    ablations.save_results(path, first)
    second["runs"]["k2"] = {"status": "ok"}
    second["groups"] = {"g": {"budget": BUDGET}}
    ablations.save_results(path, second)
    assert set(json.loads(path.read_text())["runs"]) == {"k1", "k2"} and set(second["runs"]) == {"k1", "k2"}
    first["runs"]["k1"] = {"status": "failed"}  # an invocation's own entries win
    ablations.save_results(path, first)
    disk = json.loads(path.read_text())
    assert disk["runs"] == {"k1": {"status": "failed"}, "k2": {"status": "ok"}} and disk["groups"]["g"]


def test_report_statistics_and_verdicts() -> None:
    group = {"title": "t", "claim": "c", "expected": ["a", "b", "c"], "rows": []}
    per_seed = {
        "a": {0: 70.0, 1: 72.0, 2: 74.0},
        "b": {0: 60.0, 1: 63.0, 2: 65.0},  # a - b: 10, 9, 9 (consistent)
        "c": {0: 75.0, 1: 58.0, 2: 66.0},  # a - c: -5, 14, 8; b - c: -15, 5, -1 (not consistent)
    }
    diff, p, n = ablations.paired_difference(per_seed["a"], per_seed["b"])
    # t = 9.33 / (0.577 / sqrt 3) = 28.0 on 2 degrees of freedom: p about 0.0013
    assert diff == pytest.approx(28 / 3) and 0.0005 < p < 0.005 and n == 3
    assert ablations.paired_difference({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0})[:2] == (1.0, 0.0)  # constant difference
    assert math.isnan(ablations.paired_difference({0: 2.0}, {0: 1.0, 1: 2.0})[1])  # one common seed: no test
    text = ablations._verdict("g", group, per_seed)
    assert "Reproduced: a vs b (+9.3, p = 0.00, n = 3)." in text and "Reversed: none" in text
    assert "Not resolved: a vs c (+5.7, p = 0.4" in text and "; b vs c (-3.7, p = " in text
    assert "Spearman rank correlation with the paper's order: +0.50" in text and "At chance" not in text
    dead = ablations._verdict("g", group, {**per_seed, "c": {0: 10.0, 1: 10.1, 2: 9.9}})
    assert dead.endswith("learned nothing, so an order involving them says nothing about accuracy): c.")
    text = ablations._verdict("g", {**group, "expected": ["b", "a"]}, per_seed)
    assert "Reversed: b vs a (-9.3" in text and "Reproduced: none" in text
    best_only = ablations._verdict("g", {**group, "expected_best_only": True}, per_seed)
    assert "Spearman" not in best_only and "b vs c" not in best_only
    m, s, n = ablations._stats([70.0, 72.0, 74.0])
    assert (m, s, n) == (72.0, 2.0, 3)
    assert ablations.mean_sd([70.0, 72.0, 74.0]) == "72.0 ± 2.0 (n=3)"
    assert ablations.rank_correlation(["a", "b", "c"], {"a": 3.0, "b": 2.0, "c": 1.0}) == pytest.approx(1.0)
    assert ablations.rank_correlation(["a", "b", "c"], {"a": 1.0, "b": 2.0, "c": 3.0}) == pytest.approx(-1.0)


def test_report_states_the_budget_and_compute_and_points_to_other_records() -> None:
    row = ablations.GROUPS["hcnet_filter"]["rows"][0]
    results = {"runs": {}, "evals": {}, "machine": "m", "groups": {"hcnet_filter": {"budget": BUDGET}}}
    for seed, (top1, cpu) in enumerate([(60.0, 40.0), (62.0, 50.0), (64.0, 60.0)]):
        results["runs"][ablations.train_key(row, seed, BUDGET)] = {
            "status": "ok", "best_val_top1": top1, "seconds": 100.0, "cpu_seconds": cpu, "params": 1_000_000,
        }  # fmt: skip
    other = {**BUDGET, "lr": 2e-3}  # the report follows each group's recorded budget, not the one given
    md = ablations.report(results, ["hcnet_filter", "hcnet_k", "qbheat_mae"], [0, 1, 2], other)
    assert "Budget, the same for every row: data `scenes`, 32 px, 2 epochs, batch 8" in md
    assert "lr 0.000125 (the recipe's 0.008 at batch 512, scaled to the batch)" in md and "0.002" not in md
    assert "3 distinct trainings, 2.5 CPU-minutes" in md
    assert "| RA filter on (default) | `—` | 1.000 | 62.0 ± 2.0 (n=3) | 50 ± 10 (n=3) | 100 ± 0 (n=3) |" in md
    assert "RA filter off (parameter-matched)" in md and "not run yet" in md
    assert "Not run in this record." in md and "- **hcnet_k**: not run." in md  # a group never run
    assert "qbheat_vs_mae.md" in md
    results["groups"]["hcnet_k"] = {"budget": other}
    md = ablations.report(results, ["hcnet_filter", "hcnet_k"], [0, 1, 2], BUDGET, notes=["calibrated"])
    assert "stated with each group" in md and "lr 0.002 (absolute)" in md and "\n- calibrated\n" in md


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


@pytest.mark.slow
def test_resolution_group_evaluates_the_shared_training_at_other_sizes(tmp_path: Path) -> None:
    args = [
        "--rows", "vheat_resolution", "--seeds", "1", "--epochs", "1", "--batch-size", "8", "--img-size", "32",
        "--max-train-batches", "1", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
        "--json", str(tmp_path / "a.json"), "--md", str(tmp_path / "a.md"),
    ]  # fmt: skip
    assert ablations.main(args) == 0
    results = json.loads((tmp_path / "a.json").read_text())
    assert len(results["runs"]) == 1  # three rules, two kinds of validation scenes, one training
    evals = [e for e in results["evals"].values() if e["status"] == "ok"]
    assert len(evals) == 6 and all(set(e["top1"]) == {"32", "48", "64"} for e in evals)
    at_32 = {e["top1"]["32"] for e in evals}
    assert len(at_32) == 1  # at the training size every rule is the trained model, on the same scenes
    assert len([k for k in results["evals"] if '"fixed_objects": true' in k]) == 3
    assert "top-1 at 48 px" in (tmp_path / "a.md").read_text()


def test_a_group_run_at_a_second_budget_reports_both() -> None:
    bigger = {**BUDGET, "img_size": 64, "epochs": 15}
    on, off = ablations.GROUPS["hcnet_filter"]["rows"]
    results = {"runs": {}, "evals": {}, "machine": "m", "groups": {"hcnet_filter": {"budget": BUDGET}}}
    for budget, (a, b) in ((BUDGET, (20.0, 10.0)), (bigger, (60.0, 40.0))):
        for seed in range(3):
            for row, top1 in ((on, a + seed), (off, b + 2 * seed)):
                results["runs"][ablations.train_key(row, seed, budget)] = {
                    "status": "ok", "best_val_top1": top1, "seconds": 1.0, "cpu_seconds": 1.0, "params": 10,
                }  # fmt: skip
    # an invocation at the larger budget keeps the first one (a record written before budgets were listed)
    rec = results["groups"]["hcnet_filter"]
    results["groups"]["hcnet_filter"] = {"budgets": [rec["budget"], bigger]}
    assert [b for b, _ in ablations.group_budgets(results, "hcnet_filter", BUDGET, {})] == [BUDGET, bigger]
    md = ablations.report(results, ["hcnet_filter"], [0, 1, 2], BUDGET)
    assert "### At 32 px, 2 epochs" in md and "### At 64 px, 15 epochs" in md
    assert (
        md.index("### At 32 px")
        < md.index("| RA filter on (default) | `—` | 0.000 | 21.0 ± 1.0 (n=3)")
        < md.index("### At 64 px")
        < md.index("| RA filter on (default) | `—` | 0.000 | 61.0 ± 1.0 (n=3)")
    )
    assert "- **hcnet_filter at 32 px, 2 epochs**: measured" in md
    assert "- **hcnet_filter at 64 px, 15 epochs**: measured RA filter on (default) 61.0 > RA filter off" in md
    assert "12 distinct trainings" in md  # 2 rows x 3 seeds x 2 budgets


@pytest.mark.slow  # the study's run machinery (28 s): the loop's own resume is tested in tests/engine
def test_a_run_cut_off_after_an_epoch_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    from pdevision.engine import RunConfig
    from pdevision.tasks.classify import ClassifyConfig, train

    key = ablations.train_key({"model": "vheat_micro"}, 0, BUDGET)
    folder = tmp_path / "run"
    assert ablations.unfinished_epochs(folder) is None  # nothing there: a fresh start
    spec = json.loads(key)
    cut = RunConfig(output=str(folder), epochs=2, batch_size=8, seed=0, device="cpu", workers=0, progress=False,
                    max_train_batches=1, stop_after_epochs=1)  # fmt: skip
    train(ClassifyConfig(model=spec["model"], data="scenes", recipe="light", img_size=32, run=cut))
    assert ablations.unfinished_epochs(folder) == 1
    rec = ablations.run_training(key, str(folder), "cpu", 0, 1)
    assert rec["resumed_after_epoch"] == 1
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs_run"] == 2
    assert ablations.unfinished_epochs(folder) is None  # completed: a later call starts afresh, not resumes
