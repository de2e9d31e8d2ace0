"""benchmarks/archive/pathfinder_mixers: the arms, the protocol's order and gate, the statistics (against scipy and
statsmodels), the filter readings, and one real miniature run."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from benchmarks.archive.pathfinder_mixers import pathfinder_mixers as pf
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from pdevision.data import embedded
from pdevision.data.embedded import PATHFINDER_SETS, PathfinderSetSpec, pathfinder_arrays
from pdevision.data.pathfinder import PathfinderConfig

ROOT = Path(__file__).resolve().parents[2]


def test_holm_equals_statsmodels() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = list(rng.uniform(0, 0.2, size=int(rng.integers(1, 12))))
        expected = multipletests(p, alpha=0.05, method="holm")[1]
        np.testing.assert_allclose(pf.holm(p), expected, rtol=1e-12)
    assert math.isnan(pf.holm([0.01, math.nan])[1]) and pf.holm([0.01, math.nan])[0] == 0.01  # nan is not counted


def test_bootstrap_interval_is_seeded_and_covers_the_mean() -> None:
    values = [71.0, 74.5, 69.0, 80.0, 73.0]
    lo, hi = pf.bootstrap_interval(values)
    assert (lo, hi) == pf.bootstrap_interval(values)
    assert min(values) <= lo < np.mean(values) < hi <= max(values)
    # scipy's percentile bootstrap of the mean agrees to within resampling noise
    ref = stats.bootstrap((np.array(values),), np.mean, n_resamples=20000, method="percentile", random_state=0)
    assert abs(ref.confidence_interval.low - lo) < 0.5 and abs(ref.confidence_interval.high - hi) < 0.5
    assert all(math.isnan(x) for x in pf.bootstrap_interval([70.0]))


def test_paired_test_is_scipys_paired_t_test() -> None:
    a = {0: 70.0, 1: 75.0, 2: 72.0, 3: 78.0, 4: 71.0}
    b = {0: 60.0, 1: 66.0, 2: 65.0, 3: 61.0, 4: 64.0, 9: 99.0}  # seed 9 has no pair: left out
    out = pf.paired_test(a, b)
    assert out["n"] == 5 and out["mean"] == pytest.approx(np.mean([a[s] - b[s] for s in a]))
    assert out["p"] == pytest.approx(stats.ttest_rel(list(a.values()), [b[s] for s in a]).pvalue)
    assert out["ci"][0] < out["mean"] < out["ci"][1]
    assert pf.paired_test({0: 1.0}, {0: 0.0})["n"] == 1


@pytest.fixture(scope="module")
def rows() -> dict:
    return pf.arm_rows()


def test_mixer_arms_are_matched_and_controls_take_their_parents_width(rows: dict) -> None:
    heat = rows["heat"]["params"]
    for name in pf.MIXER_ARMS:
        assert abs(rows[name]["params"] / heat - 1) <= 0.05, name
        assert rows[name]["macs"] > 0 and rows[name]["parent"] is None
    for name, arm in pf.ARMS.items():
        if "parent" in arm:
            assert rows[name]["model_args"]["dims"] == rows[arm["parent"]]["model_args"]["dims"]
    assert rows["heat-pass-through"]["model_args"]["k_init"] == 0.0
    assert {a for a, b, _ in pf.CLAIMS} | {b for _, b, _ in pf.CLAIMS} <= set(pf.ARMS)


def _fake(rows: dict, arm: str, seed: int, lr: float, curve: list[float], test: float | None = None) -> tuple:
    key = pf.run_key(arm, rows[arm]["model_args"], seed, lr)
    rec = {
        "status": "ok",
        "final_val_top1": curve[-1],
        "curve": [{"epoch": i + 1, "val_top1": v, "train_loss": 0.693} for i, v in enumerate(curve)],
        "seconds": 1.0,
    }
    if test is not None:
        rec["test_top1"] = test
    return key, rec


def test_the_gate_comes_first_and_stops_everything_when_a_mixer_stays_at_chance_at_every_rate(rows: dict) -> None:
    results = {"runs": {}}
    first = pf.plan(results, rows)
    assert [p for p, _, _ in first] == ["gate"] * len(pf.MIXER_ARMS)
    for name in pf.MIXER_ARMS:
        curve = [50.0] * 12 if name == "identity" else [50.0, 55.0, 65.0] + [70.0] * 9
        key, rec = _fake(rows, name, pf.SELECTION_SEED, pf.LRS[1], curve)
        results["runs"][key] = rec
    assert pf.gate(results, rows)["identity"] is None and pf.gate(results, rows)["heat"] is True
    # identity stayed at chance at the middle rate: its other two rates are the gate's runs left
    rest = [(n, json.loads(k)["lr"]) for _, n, k in pf.plan(results, rows)]
    assert rest == [("identity", pf.LRS[0]), ("identity", pf.LRS[2])]
    assert {p for p, _, _ in pf.plan(results, rows)} == {"gate"}
    results["runs"].update([_fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[0], [50.0] * pf.GATE_EPOCH)])
    assert pf.gate(results, rows)["identity"] is None  # one rate left
    slow = dict(results["runs"])
    results["runs"].update([_fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[2], [50.0] * 12)])
    assert pf.gate(results, rows)["identity"] is False
    assert pf.plan(results, rows) == []  # the gate failed at every rate: nothing further
    section = "\n".join(pf.gate_section(results, rows))
    assert "The gate failed" in section and section.count("| identity |") == 1 and f"| {pf.LRS[2]:g} | 50 50" in section
    results["runs"] = slow  # the last rate leaves chance at the gate's epoch: identity passes at that rate
    just = [50.0] * (pf.GATE_EPOCH - 1) + [61.0] * 7
    results["runs"].update([_fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[2], just)])
    assert all(pf.gate(results, rows).values())
    assert {p for p, _, _ in pf.plan(results, rows)} == {"rates"}  # the rates not run yet: the other arms'
    assert all(n != "identity" for _, n, _ in pf.plan(results, rows))
    # leaving chance after GATE_EPOCH does not count, at any rate
    late = [50.0] * pf.GATE_EPOCH + [90.0] * 6
    results["runs"].update([_fake(rows, "identity", pf.SELECTION_SEED, lr, late) for lr in pf.LRS])
    assert pf.gate(results, rows)["identity"] is False


def test_runs_of_an_earlier_testbed_are_voided_and_shown_apart(rows: dict) -> None:
    key, rec = _fake(rows, "heat", pf.SELECTION_SEED, pf.LRS[1], [50.0] * 12)
    assert pf.is_current(key)
    old = json.loads(key)
    old["epochs"], old["testbed"]["n"][0] = 16, 16000  # the first gate's budget and testbed
    old_key = json.dumps(old, sort_keys=True)
    assert not pf.is_current(old_key)
    results = {"runs": {old_key: {**rec, "gate_epoch": 10}}}
    assert pf.done(results, key) is None  # the voided pilot does not stand in for the current one
    assert pf.plan(results, rows)[0][0] == "gate" and len(pf.plan(results, rows)) == len(pf.MIXER_ARMS)
    section = "\n".join(pf.earlier_gates(results))
    paths = f"{pf.STUDY_SPEC.config.n_dashes} / {pf.STUDY_SPEC.config.n_distractors}"  # the old key kept them
    assert f"| heat | 16,000 | {paths} | 16 | {pf.LRS[1]:g} | 10 | 50 50" in section and "0.693 -> 0.693" in section
    assert pf.earlier_gates({"runs": {key: rec}}) == []  # a current run is not an earlier one
    off_grid = pf.run_key("identity", rows["identity"]["model_args"], pf.SELECTION_SEED, 1e-3)  # the first grid's
    assert 1e-3 not in pf.LRS and not pf.is_current(off_grid)
    assert pf.is_current(pf.run_key("identity", rows["identity"]["model_args"], pf.REPORT_SEEDS[0], 1e-3))
    section = "\n".join(pf.earlier_gates({"runs": {off_grid: rec}}))
    assert f"| identity | {pf.STUDY_SPEC.n_train:,} | {paths} | {pf.BUDGET['epochs']} | 0.001 | — | 50 50" in section


def test_earlier_gates_are_listed_in_the_order_of_the_changes(rows: dict) -> None:
    """The voided gates, oldest first: the set grew (16,000 to 64,000), the budget (8 to 16 epochs), the paths got
    shorter on the first grid of rates and longer again on the lower one (change 9); a sort by path length alone put
    the 14 / 8 gate before the 9 / 6 one."""
    key, rec = _fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[1], [50.0] * 12)
    history = [  # (training images, epochs, dashes, rate), in the order they ran
        (16000, 16, 6, 1e-3),
        (64000, 8, 6, 1e-3),
        (64000, 16, 6, 1e-3),
        (64000, 16, 5, 1e-3),
        (64000, 16, 4, 2e-3),
        (64000, 16, 4, 1e-3),
        (64000, 16, 4, 5e-4),
        (64000, 16, 4, 2.5e-4),
        (64000, 16, 6, 2.5e-4),
        (64000, 16, 9, 2.5e-4),
        (64000, 16, 14, 2.5e-4),
    ]
    runs = {}
    for n, epochs, dashes, lr in reversed(history):
        spec = json.loads(key)
        spec["testbed"]["n"][0], spec["epochs"], spec["testbed"]["config"]["n_dashes"], spec["lr"] = (
            n,
            epochs,
            dashes,
            lr,
        )
        runs[json.dumps(spec, sort_keys=True)] = rec
    lines = [line for line in pf.earlier_gates({"runs": runs}) if line.startswith("| identity |")]
    shown = [tuple(cell.strip() for cell in line.split("|")[2:6]) for line in lines]
    assert shown == [
        (f"{n:,}", f"{d} / {pf.STUDY_SPEC.config.n_distractors}", str(e), f"{lr:g}") for n, e, d, lr in history
    ]


def test_rates_then_reported_seeds_seed_by_seed_with_controls_at_their_parents_rate(rows: dict) -> None:
    results = {"runs": {}}
    for name in pf.MIXER_ARMS:
        for lr, top in zip(pf.LRS, (70.0, 80.0, 80.0), strict=True):  # a tie: the smaller rate
            results["runs"].update([_fake(rows, name, pf.SELECTION_SEED, lr, [65.0] * 11 + [top])])
    assert pf.chosen_rate(results, rows, "heat") == pf.LRS[1]
    assert pf.chosen_rate(results, rows, "heat-pass-through") == pf.LRS[1]
    todo = pf.plan(results, rows)
    assert {p for p, _, _ in todo} == {"report"} and len(todo) == len(pf.ARMS) * len(pf.REPORT_SEEDS)
    seeds = [json.loads(k)["seed"] for _, _, k in todo]
    assert seeds == sorted(seeds)  # every arm's seed 0 before any seed 1
    assert all(json.loads(k)["lr"] == pf.LRS[1] for _, _, k in todo)
    assert "None finished yet: every mixer passed the gate and every rate has run, so the 70 reported runs" in (
        "\n".join(pf.reported_section(results, rows))
    )
    # the claims wait for all seeds; then heat over attention by a consistent margin is shown after Holm
    tops = {"heat": 90.0, "hcl-fixed-k": 95.0}  # an arm above heat's 70-72: its claim is shown in reverse
    for seed in pf.REPORT_SEEDS:
        for name in pf.ARMS:
            top = tops.get(name, 70.0) + (seed if name in tops else 2 * seed % 3)
            results["runs"].update([_fake(rows, name, seed, pf.LRS[1], [80.0], test=top)])
        if seed == 2:
            partial = {t["claim"]: t["verdict"] for t in pf.verdicts(results, rows)}
            assert set(partial.values()) == {"not yet tested (3 of 5 seeds)"}
    verdicts = {(t["better"], t["worse"]): t for t in pf.verdicts(results, rows)}
    assert verdicts[("heat", "attention")]["verdict"] == "shown"
    assert verdicts[("heat", "attention")]["p_holm"] >= verdicts[("heat", "attention")]["p"]
    assert verdicts[("hcl", "attention")]["verdict"] == "not shown"  # equal runs
    assert verdicts[("hcl", "hcl-fixed-k")]["verdict"] == "the reverse is shown"
    text = pf.report({**results, "rows": rows, "step0": {}, "machine": "test"})
    assert "| heat |" in text and "| shown |" in text and "'Not shown' is not evidence" in text
    assert "| heat | 0.00025 | 5 | 92.0 [" in text and "| 90.0 91.0 92.0 93.0 94.0 | 0 of 5 |" in text


def test_the_budget_line_counts_the_whole_protocol_and_times_the_rest_from_current_runs(rows: dict) -> None:
    assert pf.protocol_size() == 7 * 3 + 14 * 5  # selection runs at three rates, then 5 seeds of every arm
    results = {"runs": {}}
    assert "91 runs, 0 done; no run of this budget" in pf.budget_line(results)
    old_key, old = _fake(rows, "heat", pf.SELECTION_SEED, pf.LRS[1], [50.0])
    old_key = old_key.replace(f'"epochs": {pf.BUDGET["epochs"]}', '"epochs": 3')  # voided: not timed, not counted
    results["runs"][old_key] = _timed(old, [1e6])
    for name, seconds in (("identity", 90.0), ("heat", 150.0)):
        key, rec = _fake(rows, name, pf.SELECTION_SEED, pf.LRS[1], [50.0] * 10)
        results["runs"][key] = _timed(rec, [seconds] * 10)
    line = pf.budget_line(results)
    assert "91 runs, 2 done" in line and "mean epoch time (120 s, one thread a run)" in line
    hours = 89 * pf.BUDGET["epochs"] * 120 / 3600  # the runs left, each its budget's epochs at 120 s
    assert f"the 89 left need at most about {hours:.1f} hours of training, {hours / 2:.1f} with two runs side" in line


def test_the_budget_line_of_a_finished_protocol_says_so(rows: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pf, "protocol_size", lambda: 1)
    key, rec = _fake(rows, "heat", pf.SELECTION_SEED, pf.LRS[1], [50.0] * 10)
    line = pf.budget_line({"runs": {key: _timed(rec, [75.0] * 10)}})
    assert line.endswith("1 runs, 1 done, none left (mean epoch time 75 s, one thread a run).")


def _timed(rec: dict, epoch_seconds: list[float]) -> dict:
    curve = [{**e, "epoch_seconds": t} for e, t in zip(rec["curve"], epoch_seconds, strict=True)]
    return {**rec, "curve": curve, "seconds": 1.0}


def test_a_runs_time_counts_every_part_and_not_a_pause(rows: dict) -> None:
    """A run resumed after a stop measured only its last process (5 of the first 27 runs); a paused epoch (the
    machine stopped the run while the test suite ran) lasts as long as the pause."""
    _, rec = _fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[1], [50.0] * 10)
    resumed = {**_timed(rec, [100.0, 2400.0] + [100.0] * 8), "resumed_after_epoch": 8, "seconds": 200.0}
    assert pf.run_seconds(resumed) == pytest.approx(1000.0)
    assert pf.run_seconds({**rec, "seconds": 1234.0}) == 1234.0  # recorded before the curves kept epoch times
    results = {"machine": "x86_64, 2 cores", "runs": {"a": {**rec, "machine": "AMD EPYC 7B13, 2 cores"}, "b": rec}}
    assert pf.machines(results) == "AMD EPYC 7B13, 2 cores; x86_64, 2 cores (the CPU model not recorded)"


def test_no_further_pilot_starts_once_one_has_failed_the_gate(rows: dict) -> None:
    results = {"runs": {}}
    key, rec = _fake(rows, "identity", pf.SELECTION_SEED, pf.LRS[1], [50.0] * pf.GATE_EPOCH)
    results["runs"][key] = {**rec, "stopped_at_gate": True}
    for lr in (pf.LRS[0], pf.LRS[2]):  # and at the other rates
        other, stopped = _fake(rows, "identity", pf.SELECTION_SEED, lr, [50.0] * pf.GATE_EPOCH)
        results["runs"][other] = {**stopped, "stopped_at_gate": True}
    assert pf.gate(results, rows)["identity"] is False and pf.gate(results, rows)["heat"] is None
    assert pf.plan(results, rows) == []
    section = "\n".join(pf.gate_section(results, rows))
    assert "The gate failed" in section and "| heat |" in section and "not run" in section


def test_filter_readings_against_numpy() -> None:
    torch.manual_seed(0)
    passthrough = pf.build({"mixer": "heat", "k_mode": "fixed", "k_init": 0.0, "dims": 16})
    got = pf.filter_stats(passthrough, 32)
    assert got["highest"] == pytest.approx(1.0) and got["from_pass_through"] == pytest.approx(0.0, abs=1e-7)
    k1 = pf.filter_stats(pf.build({"mixer": "heat", "k_mode": "fixed", "k_init": 1.0, "dims": 16}), 32)
    # one mixer per block: depths 1-1-3-1 on maps of 8, 4, 2 and 1 px at 32 px (the 1-px map is left out);
    # |w|_max^2 = 2 (pi (n-1) / n)^2
    expected = np.mean([np.exp(-2 * (np.pi * (n - 1) / n) ** 2) for n in (8, 4, 2, 2, 2)])
    assert k1["highest"] == pytest.approx(expected, rel=1e-5)
    assert pf.filter_stats(pf.build({"mixer": "sepconv", "dims": 16}), 32) is None
    step0 = pf.step0_filters({"heat": {"model_args": {**pf.ARMS["heat"]["args"], "dims": 16}}})
    assert 0.4 < step0["heat"]["highest"] < 0.8  # heat's own start damps the highest frequency


def _mini_key() -> str:
    PATHFINDER_SETS.setdefault("pathfinder-test-mini", PathfinderSetSpec(64, 32, 32, PathfinderConfig(n_dashes=4)))
    return json.dumps(
        {
            "arm": "heat",
            "model": pf.MODEL,
            "model_args": {"mixer": "heat", "dims": 16, "k_init": pf.K_HEAT},
            "seed": 0,
            "lr": 1e-3,
            "data": "pathfinder-test-mini",
            "epochs": 2,
            "batch_size": 32,
            "img_size": 32,
            "recipe": "pathfinder",
        }
    )


def test_one_real_miniature_run(tmp_path) -> None:
    key = _mini_key()
    rec = pf.train_run(key, str(tmp_path / "run"))
    assert rec["status"] == "ok" and [e["epoch"] for e in rec["curve"]] == [1.0, 2.0]
    assert 0 <= rec["test_top1"] <= 100 and rec["filters"]["from_pass_through"] > 0
    assert rec["final_val_top1"] == rec["curve"][-1]["val_top1"]


@pytest.mark.slow  # the archived study's run machinery: the study is closed, its record tests stay fast
def test_the_testbed_is_drawn_once_into_the_cache_before_any_run(tmp_path, monkeypatch) -> None:
    """The script draws all three splits, the blocks shared out over its workers, so that no two runs draw the same
    images side by side (the 14 / 8 training split took an hour); a run then loads them and draws nothing."""
    spec = PathfinderSetSpec(300, 20, 20, PathfinderConfig(n_dashes=4), seed=5)  # two blocks of training images
    monkeypatch.setitem(PATHFINDER_SETS, "pathfinder-test-bed", spec)
    monkeypatch.setattr(pf, "STUDY_SET", "pathfinder-test-bed")
    monkeypatch.setenv(pf.DATA_CACHE, str(tmp_path))
    pathfinder_arrays.cache_clear()
    try:
        pf.draw_testbed(2)
        names = sorted(path.name.split("-")[3] for path in tmp_path.glob("*.npz"))
        assert names == ["test", "train", "val"], names
        pathfinder_arrays.cache_clear()
        monkeypatch.setattr(embedded, "make_pathfinder", pytest.fail)  # loaded, not drawn again
        images, labels = pathfinder_arrays("pathfinder-test-bed", "train", 32)
        assert images.shape == (300, 32, 32) and labels.sum() == 150
    finally:
        pathfinder_arrays.cache_clear()


def test_a_pilot_that_has_not_left_chance_stops_at_the_gate_and_one_that_has_goes_on(tmp_path, monkeypatch) -> None:
    key = _mini_key()
    monkeypatch.setattr(pf, "LEFT_CHANCE", 101.0)  # no run can reach it
    rec = pf.train_run(key, str(tmp_path / "failed"), test=False, gate_epoch=1)
    assert rec["stopped_at_gate"] is True and [e["epoch"] for e in rec["curve"]] == [1.0]
    assert json.loads((tmp_path / "failed" / "summary.json").read_text())["status"] == "stopped after epoch 1 of 2"
    monkeypatch.setattr(pf, "LEFT_CHANCE", 0.0)  # every run reaches it
    rec = pf.train_run(key, str(tmp_path / "passed"), test=False, gate_epoch=1)
    assert "stopped_at_gate" not in rec and [e["epoch"] for e in rec["curve"]] == [1.0, 2.0]
    assert rec["resumed_after_epoch"] == 1  # the same run, continued from the gate's epoch
    assert json.loads((tmp_path / "passed" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.slow  # the archived study's run machinery: the study is closed, its record tests stay fast
def test_a_killed_script_leaves_no_worker_training(tmp_path) -> None:
    """The workers of a stopped script outlived it and trained on unrecorded (found in the third gate)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import concurrent.futures as f, multiprocessing, os, sys, time\n"
        "from benchmarks.archive.pathfinder_mixers import pathfinder_mixers as pf\n"
        "if __name__ == '__main__':\n"
        "    ex = f.ProcessPoolExecutor(1, multiprocessing.get_context('spawn'), initializer=pf.exit_with_parent,\n"
        "                               initargs=(os.getpid(),))\n"
        "    print(ex.submit(os.getpid).result(), flush=True)\n"
        "    ex.submit(time.sleep, 600)\n"
        "    time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError(f"worker {worker} outlived its killed parent by 10 s")


def test_a_write_cut_off_mid_way_leaves_the_record_as_it_was(tmp_path, monkeypatch) -> None:
    path = tmp_path / "record.json"
    pf.save(path, {"runs": {"a": {"status": "ok"}}})
    before = path.read_bytes()

    def cut_off(self, text, *args, **kwargs):  # the process dies half-way through the write
        with open(self, "w") as f:
            f.write(text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(type(path), "write_text", cut_off)
    with pytest.raises(KeyboardInterrupt):
        pf.save(path, {"runs": {"a": {"status": "ok"}, "b": {"status": "ok"}}})
    assert path.read_bytes() == before and pf.load(path) == {"runs": {"a": {"status": "ok"}}}


def test_a_local_arm_at_the_ceiling_makes_the_testbed_too_easy(rows: dict) -> None:
    results = {"runs": {}}
    for name in pf.MIXER_ARMS:
        top = 96.0 if name == "pooling" else 80.0
        results["runs"].update([_fake(rows, name, pf.SELECTION_SEED, pf.LRS[1], [50.0, 70.0] + [top] * 14)])
    assert all(pf.gate(results, rows).values()) and pf.saturated(results, rows) == ["pooling"]
    assert pf.plan(results, rows) == []  # left chance, but too easy: nothing further
    assert "The testbed is too easy: pooling" in "\n".join(pf.gate_section(results, rows))
    results["runs"].update([_fake(rows, "pooling", pf.SELECTION_SEED, pf.LRS[1], [50.0, 70.0] + [94.9] * 14)])
    assert pf.saturated(results, rows) == [] and {p for p, _, _ in pf.plan(results, rows)} == {"rates"}
    results["runs"].update([_fake(rows, "heat", pf.SELECTION_SEED, pf.LRS[1], [50.0, 70.0] + [99.0] * 14)])
    assert pf.saturated(results, rows) == []  # a global arm at the ceiling is not a sign of an easy testbed


def test_runs_in_flight_are_not_started_twice_and_hold_back_the_next_phase(rows: dict) -> None:
    pilots = [key for _, _, key in pf.plan({"runs": {}}, rows)]
    assert pf.plan({"runs": {}}, rows, frozenset(pilots[:2]))[0][2] == pilots[2]
    assert pf.plan({"runs": {}}, rows, frozenset(pilots)) == []  # all pilots in flight: wait
    results = {"runs": dict(_fake(rows, n, pf.SELECTION_SEED, pf.LRS[1], [70.0] * 16) for n in pf.MIXER_ARMS[1:])}
    # the last pilot still trains: no rate run starts before the gate is decided
    assert pf.plan(results, rows, frozenset(pilots[:1])) == []
    assert {p for p, _, _ in pf.plan(results, rows)} == {"gate"}


def test_keep_busy_starts_the_next_run_as_soon_as_one_ends() -> None:
    """Two at a time: the short run b ends, and c starts while the long run a still trains (a batch of two would
    have waited for a); a run that raises is recorded as failed; no more than max_runs start."""
    import concurrent.futures as futures
    import threading

    c_started = threading.Event()
    work = {
        "a": lambda: {"status": "ok" if c_started.wait(10) else "a ended before c started"},
        "b": lambda: {"status": "ok"},
        "c": lambda: c_started.set() or {"status": "ok"},
        "d": lambda: 1 / 0,
        "e": lambda: {"status": "ok"},
    }
    ended: dict[str, dict] = {}

    def left(running: frozenset[str]) -> list[tuple[str, str, str]]:
        return [("report", "arm", k) for k in work if k not in ended and k not in running]

    with futures.ThreadPoolExecutor(2) as pool:
        started = pf.keep_busy(
            lambda phase, key: pool.submit(work[key]), left, lambda k, p, rec: ended.update({k: rec}), 2, 4
        )
    assert started == 4 and set(ended) == {"a", "b", "c", "d"}
    assert ended["a"]["status"] == "ok" and ended["d"] == {
        "status": "failed",
        "reason": "ZeroDivisionError: division by zero",
    }
    assert "e" not in ended


def test_a_report_without_a_record_is_one_line(tmp_path, capsys) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit) as exit_info:
        pf.main(["--report-only", "--json", str(missing)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "holds no record of this study" in err and "Traceback" not in err
    assert not missing.exists() and not missing.with_suffix(".md").exists()


def _percentages(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def _estimates(text: str) -> list[tuple[float, float, float]]:
    """Every estimate with its interval, ``x [lo, hi]`` (``x%`` too), as a triple."""
    found = re.findall(r"(-?\d+(?:\.\d+)?)%? \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]", text)
    return [(float(x), float(lo), float(hi)) for x, lo, hi in found]


def _quoted(text: str) -> list[float]:
    """The figures a passage quotes: every percentage, and every estimate with its interval, ``x [lo, hi]``."""
    return _percentages(text) + [x for triple in _estimates(text) for x in triple]


def test_quoted_figures_include_estimates_and_their_intervals() -> None:
    text = "heat 82.7% [77.4, 89.2]; heat vs attention -0.3 [-10.0, 7.7]; a [link](x.md)"
    assert sorted(_quoted(text)) == sorted([82.7, 82.7, 77.4, 89.2, -0.3, -10.0, 7.7])


def _test_tops(record: dict) -> dict[str, dict[int, float]]:
    """The reported runs' test top-1, by arm and seed."""
    tops: dict[str, dict[int, float]] = {}
    for key, rec in record["runs"].items():
        if "test_top1" in rec:
            spec = json.loads(key)
            tops.setdefault(spec["arm"], {})[spec["seed"]] = rec["test_top1"]
    return tops


def _paired_differences(record: dict) -> dict[tuple[str, str], np.ndarray]:
    tops = _test_tops(record)
    return {(a, b): np.array([tops[a][s] - tops[b][s] for s in pf.REPORT_SEEDS]) for a, b, _ in pf.CLAIMS}


def _t_intervals(record: dict) -> list[tuple[float, float, float]]:
    """Each claim's mean difference with its paired t-interval (scipy), as the docs round them."""
    out = []
    for d in _paired_differences(record).values():
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        out.append((round(float(d.mean()), 1), round(float(lo), 1), round(float(hi), 1)))
    return out


def _power_range(record: dict) -> tuple[float, float, float, float, int]:
    """Over the claims whose paired differences spread by more than 5 points (every claim whose arms start apart
    but HcNet's fixed k): the smallest and largest spread, the power of a paired t-test at 0.05 to find a 3-point
    difference at 5 seeds at each end (statsmodels), and how many claims that is."""
    spreads = sorted(float(d.std(ddof=1)) for d in _paired_differences(record).values() if d.std(ddof=1) > 5)
    power = [TTestPower().power(effect_size=3 / sd, nobs=len(pf.REPORT_SEEDS), alpha=0.05) for sd in spreads]
    return spreads[0], spreads[-1], min(power), max(power), len(spreads)


def _bootstrap_coverage(n: int = 5, samples: int = 20_000) -> float:
    """How often the percentile bootstrap 95% interval of a mean of ``n`` normal values holds the true mean: the
    bootstrap distribution taken exactly (every resample's weight, as infinitely many resamples give it), the
    samples simulated with a fixed seed."""
    counts = np.array([c for c in itertools.product(range(n + 1), repeat=n) if sum(c) == n], dtype=float)
    weights = np.array([math.factorial(n) / np.prod([math.factorial(int(k)) for k in c]) for c in counts]) / n**n
    x = np.random.default_rng(0).standard_normal((samples, n))
    means = x @ counts.T / n
    order = np.argsort(means, axis=1)
    sorted_means, cumulative = np.take_along_axis(means, order, 1), np.cumsum(weights[order], axis=1)
    rows = np.arange(samples)
    lo = sorted_means[rows, (cumulative < 0.025).sum(1)]
    hi = sorted_means[rows, (cumulative < 0.975).sum(1)]
    return float(((lo < 0) & (hi > 0)).mean())


def test_the_bootstrap_coverage_is_the_scripts_at_five_seeds() -> None:
    """The exact-resampling coverage above agrees with the study's own interval (10,000 resamples) on the same kind
    of samples, to within the simulation's noise."""
    x = np.random.default_rng(1).standard_normal((300, 5))
    script = np.mean([lo < 0 < hi for lo, hi in (pf.bootstrap_interval(list(row)) for row in x)])
    assert abs(script - _bootstrap_coverage()) < 0.06 and 0.80 < _bootstrap_coverage() < 0.88


def _passages() -> dict[str, str]:
    """What users read of the study: each README paragraph that links its record, each paragraph of
    docs/ablations.md that does, and docs/mixers.md from its first link to the record to the page's end."""
    link = "pathfinder_mixers.md"
    out: dict[str, str] = {}
    for name in ("README.md", "docs/ablations.md"):
        paragraphs = re.split(r"\n\s*\n", (ROOT / name).read_text())
        out[name] = "\n\n".join(p for p in paragraphs if link in p)
    mixers = (ROOT / "docs" / "mixers.md").read_text()
    out["docs/mixers.md"] = mixers[mixers.index(link) :]
    return out


def test_the_pathfinder_figures_in_the_readme_and_docs_are_the_records() -> None:
    """Every figure that the passages on the study quote (a percentage, or an estimate with its interval) is a
    validation or test top-1 of a run in the JSON, a figure of the report written from the JSON (means, intervals,
    claim differences), one of the stopped runs' or protocol changes' logged figures, one of the protocol's lines
    (chance left, saturated, the width match), or one of the limits computed here from the JSON (the paired
    t-intervals, the power of its 5 seeds) and by simulation (the bootstrap's coverage); an estimate with its
    interval is one of the report's or one of the t-intervals as a whole. A number typed by hand fails."""
    record = json.loads((pf.HERE / "pathfinder_mixers.json").read_text())
    report = pf.report(record)
    known = {round(p["val_top1"], 2) for rec in record["runs"].values() for p in rec.get("curve", [])}
    known |= {round(rec["test_top1"], 2) for rec in record["runs"].values() if "test_top1" in rec}
    known |= {round(float(x), 2) for x in re.findall(r"-?\d+\.\d+", report)}
    known |= {round(x, 2) for note in (*pf.STOPPED_RUNS, *pf.PROTOCOL_CHANGES) for x in _percentages(note)}
    known |= {pf.LEFT_CHANCE, pf.SATURATED, 5.0}  # the 5%: parameters matched within it
    t_intervals = _t_intervals(record)
    known |= {x for triple in t_intervals for x in triple}
    *_, low_power, high_power, _ = _power_range(record)
    known |= {round(100 * low_power), round(100 * high_power), round(100 * _bootstrap_coverage())}
    estimates = set(_estimates(report)) | set(t_intervals)
    for name, text in _passages().items():
        quoted = _quoted(text)
        assert name == "README.md" or len(quoted) > 10, name
        assert [x for x in quoted if round(x, 2) not in known] == [], name
        # an estimate and its interval are one of the report's or a t-interval, together (not three figures found
        # apart)
        assert [t for t in _estimates(text) if t not in estimates] == [], name
    hours = re.search(r"Done so far: \d+ runs .*?, ([\d.]+) hours of training", report).group(1)
    for name, text in _passages().items():  # the study's budget, as the record's header gives it
        assert set(re.findall(r"([\d.]+) hours of training", text)) <= {hours}, name
    assert re.findall(r"took ([\d.]+) hours of training", _passages()["docs/mixers.md"]) == [hours]


def _figures(text: str) -> set[str]:
    """The numbers a reader reads in ``text``, as written (not those glued to a word, such as ``ResNet-50``)."""
    return set(re.findall(r"(?<![\w.\-])\d+(?:\.\d+)?", re.sub(r"`[^`]*`|\]\([^)]*\)", "", text)))


def test_the_limits_in_docs_mixers_are_computed_from_the_record(rows: dict) -> None:
    """The archived study's limits quote the figures computed here, however they are worded: the spread of the
    paired differences and how many claims it covers (the power and the coverage are percentages: the figure test
    above), and the identity arm's receptive field, computed from its layers (every convolution in order: it has
    no other spatial operation), against the study's image size."""
    record = json.loads((pf.HERE / "pathfinder_mixers.json").read_text())
    low_sd, high_sd, _, _, claims = _power_range(record)
    torch.manual_seed(0)
    field, jump = 1, 1
    for module in pf.build(rows["identity"]["model_args"]).modules():
        assert not isinstance(module, (torch.nn.AvgPool2d, torch.nn.MaxPool2d)), "a pooling layer left out"
        if isinstance(module, torch.nn.Conv2d):
            field += (module.kernel_size[0] - 1) * jump
            jump *= module.stride[0]
    assert field > pf.BUDGET["img_size"]  # even the identity arm sees the whole image
    quoted = _figures(_passages()["docs/mixers.md"].split("### The protocol", 1)[0])
    wanted = {f"{low_sd:.1f}", f"{high_sd:.1f}", str(claims), str(field), str(pf.BUDGET["img_size"])}
    assert wanted <= quoted, wanted - quoted


def test_only_two_claims_compare_arms_that_start_from_the_same_weights(rows: dict) -> None:
    """Built from one seed, as the training loop builds a run's model after seeding, the two arms of a claim share
    their initial weights only for wave against heat (every weight both have but the FVEs; wave's own parameters
    are the part compared) and heat against its authors' start."""
    shared = []
    for better, worse, _ in pf.CLAIMS:
        weights = []
        for arm in (better, worse):
            torch.manual_seed(0)
            weights.append(pf.build(rows[arm]["model_args"]).state_dict())
        a, b = weights
        common = [k for k in a if k in b and a[k].shape == b[k].shape]
        differ = {k for k in common if not torch.equal(a[k], b[k])}
        if len(common) >= 0.9 * min(len(a), len(b)) and all("freq_embed" in k for k in differ):
            shared.append((better, worse, bool(differ)))
    assert shared == [("wave", "heat", True), ("heat", "heat-authors-init", False)]


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table whose header row starts with ``header``."""
    lines = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]  # past the header and its rule
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


def test_the_result_tables_of_docs_mixers_are_the_reports_row_by_row() -> None:
    """Arm by arm and claim by claim, in the report's order: a figure moved to the wrong row, which the figure test
    above cannot see (it is still a figure of the record), fails here."""
    report = pf.report(json.loads((pf.HERE / "pathfinder_mixers.json").read_text()))
    docs = (ROOT / "docs" / "mixers.md").read_text().split("### The result", 1)[1]
    arms = _table(report, "| arm | rate | n | test top-1")
    assert [[f"{r[3].replace(' [', '% [')}", r[5]] for r in arms] == [r[1:] for r in _table(docs, "| arm | test")]
    claims = _table(report, "| claim | difference")
    assert [[r[1], r[4]] for r in claims] == [r[1:] for r in _table(docs, "| claim | difference")]
    assert len(arms) == len(pf.ARMS) and len(claims) == 12


def test_the_gate_table_marks_an_arms_chosen_rate_once_its_three_rates_have_run(rows: dict) -> None:
    results = {"runs": {}}
    finals = {pf.LRS[0]: 80.0, pf.LRS[1]: 85.0, pf.LRS[2]: 85.0}  # a tie: the smaller rate
    for lr, final in finals.items():
        results["runs"].update([_fake(rows, "heat", pf.SELECTION_SEED, lr, [50.0, 65.0, final])])
        table = "\n".join(pf.gate_section(results, rows))
        marked = re.findall(r"\*\*([0-9.e-]+)\*\*", table)
        assert marked == ([] if lr != pf.LRS[2] else [f"{pf.LRS[1]:g}"]), (lr, table)
    assert pf.chosen_rate(results, rows, "heat-pass-through") == pf.LRS[1]  # a control takes its parent's


def test_the_filter_table_gives_each_trained_arm_the_mean_of_its_reported_runs(rows: dict) -> None:
    results = {"runs": {}}
    for name in pf.MIXER_ARMS:
        for lr in pf.LRS:
            results["runs"].update([_fake(rows, name, pf.SELECTION_SEED, lr, [80.0 if lr == pf.LRS[1] else 70.0])])
    readings = ([0.5, 0.25, 1.0, 0.1, 0.0, -0.2], [0.7, 0.35, 0.8, 0.3, None, -0.4])  # highest, away, four bands
    for seed, (high, away, *bands) in enumerate(readings):  # seeds 0 and 1
        key, rec = _fake(rows, "wave", seed, pf.LRS[1], [80.0], test=80.0)
        results["runs"][key] = {**rec, "filters": {"highest": high, "from_pass_through": away, "bands": bands}}
    results["step0"] = {"wave": {"highest": 0.533, "from_pass_through": 0.268, "bands": [1.12, 1.37, 0.93, -0.07]}}
    table = "\n".join(pf.filters_section(results, rows))
    assert "| wave | step 0 | 0.533 | 0.268 | 1.12 1.37 0.93 -0.07 |" in table
    assert "| wave | trained (n=2) | 0.600 | 0.300 | 0.90 0.20 0.00 -0.30 |" in table  # a band not read is left out


def test_the_curves_figure_is_drawn_from_a_record(rows: dict, tmp_path) -> None:
    results = {"runs": dict([_fake(rows, "heat", pf.SELECTION_SEED, lr, [50.0, 60.0, 70.0]) for lr in pf.LRS])}
    results["runs"].update([_fake(rows, "heat", 0, pf.LRS[1], [50.0, 70.0, 80.0], test=80.0)])
    pf.plot_curves(results, tmp_path / "curves.png")
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.ndim == 3 and image.shape[0] > 400 and image.shape[1] > 800


def test_the_curves_figure_keeps_a_panel_for_its_key(rows: dict, tmp_path, monkeypatch) -> None:
    results = {"runs": dict([_fake(rows, "heat", pf.SELECTION_SEED, pf.LRS[1], [50.0, 60.0])])}
    arms, heights = list(pf.ARMS.items()), {}
    for n in (3, 4):  # 3 arms and the key fill one row of four; 4 arms push the key onto a second row
        monkeypatch.setattr(pf, "ARMS", dict(arms[:n]))
        pf.plot_curves(results, tmp_path / f"curves{n}.png")
        heights[n] = matplotlib.image.imread(tmp_path / f"curves{n}.png").shape[0]
    assert heights[4] > 1.5 * heights[3]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--max-runs", "-1"], "--max-runs at least 0"),
        (["--report-only", "--json", "{bad}"], "is not a readable record of this study"),
        (["--plan", "--json", "{bad}"], "is not a readable record of this study"),
    ],
)
def test_bad_arguments_and_a_corrupt_record_are_one_line(tmp_path, capsys, argv: list, says: str) -> None:
    bad = tmp_path / "record.json"
    bad.write_bytes(b"{ not json \xff")
    with pytest.raises(SystemExit) as exit_info:
        pf.main([a.replace("{bad}", str(bad)) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and says in err and "Traceback" not in err
    assert bad.read_bytes() == b"{ not json \xff" and not bad.with_suffix(".md").exists()  # nothing overwritten


def test_arms_keeps_the_plans_order_and_only_the_named_arms() -> None:
    todo = [("report", "heat-fixed-k-1", "a"), ("report", "wave-authors-init", "b"), ("report", "hcl-fixed-k", "c")]
    assert pf.only_arms(todo, frozenset({"hcl-fixed-k", "heat-fixed-k-1"})) == [todo[0], todo[2]]
    assert pf.only_arms(todo, None) == todo


@pytest.mark.parametrize("given", ["heat,nope", ",", ""])
def test_an_unknown_arm_is_one_line(given: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pf.main(["--plan", "--arms", given])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--arms" in err and "expected comma-separated names" in err
    assert "Traceback" not in err


def test_arms_with_report_only_is_refused_not_ignored(tmp_path, capsys) -> None:
    record = tmp_path / "record.json"
    with pytest.raises(SystemExit) as exit_info:
        pf.main(["--report-only", "--arms", "heat", "--json", str(record)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--report-only starts none" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no report written
