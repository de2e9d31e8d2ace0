"""benchmarks/pathfinder_flat: the design check's conditions fail loudly, the power and the analysis are statsmodels'
and scipy's (checked against independent computations), the report is the record's."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from benchmarks.pathfinder_flat import pathfinder_flat as pf
from scipy import stats

from pdevision.data.pathfinder import make_pathfinder


def _power(n: int, sd: float, alpha: float, one_sided: bool) -> float:
    """Power of the paired t-test at n pairs for a 3-point difference, from the noncentral t (written here)."""
    df, nc = n - 1, pf.MARGIN / sd * np.sqrt(n)
    if one_sided:
        return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, nc))
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


@pytest.mark.parametrize("kind", ["diff", "noninferior"])
@pytest.mark.parametrize("sd", [2.0, 8.0])
def test_seeds_needed_is_the_least_n_with_80_percent_power_after_holm(kind: str, sd: float) -> None:
    n = pf.seeds_needed(sd, kind)
    alpha = pf.ALPHA / len(pf.CONTRASTS)
    assert _power(n, sd, alpha, kind == "noninferior") >= 0.8 > _power(n - 1, sd, alpha, kind == "noninferior")


def test_the_power_plan_takes_the_spread_of_paired_differences() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(70, 8, 3)  # seed effects shared by the arms: they cancel in the paired differences
    pilot = {arm: {str(s): float(base[s] + rng.normal(0, 1)) for s in range(3)} for arm in pf.FLAT_ARMS}
    plan = pf.power_plan(pilot)
    heat = np.array([pilot["heat"][str(s)] for s in range(3)])
    wave = np.array([pilot["wave"][str(s)] for s in range(3)])
    assert plan["contrasts"]["wave vs heat"]["sd_paired"] == pytest.approx(np.std(wave - heat, ddof=1))
    assert plan["seeds_per_arm"] == max(r["seeds_needed"] for r in plan["contrasts"].values())


def test_the_analysis_is_a_paired_t_interval_with_holm_over_the_four_contrasts() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(70, 8, 12)
    shift = {"heat": 4.0, "heat_pass": 0.0, "wave": 4.5, "attention": 3.5, "dwconv": 1.0}
    results = {a: {str(s): float(base[s] + shift[a] + rng.normal(0, 1.5)) for s in range(12)} for a in shift}
    rows = pf.analyse(results)
    assert [r["contrast"] for r in rows] == [c[0] for c in pf.CONTRASTS]
    d = np.array([results["heat"][str(s)] - results["heat_pass"][str(s)] for s in range(12)])
    half = stats.t.ppf(0.975, 11) * d.std(ddof=1) / np.sqrt(12)
    np.testing.assert_allclose(rows[0]["ci95"], [d.mean() - half, d.mean() + half])
    assert rows[0]["p"] == pytest.approx(
        stats.ttest_rel(
            [results["heat"][str(s)] for s in range(12)], [results["heat_pass"][str(s)] for s in range(12)]
        ).pvalue
    )
    # Holm by hand: sorted p times (m - rank), running maximum, capped at 1
    p = np.array([r["p"] for r in rows])
    order = np.argsort(p)
    held = np.minimum(np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))), 1.0)
    expected = np.empty_like(held)
    expected[order] = held
    np.testing.assert_allclose([r["p_holm"] for r in rows], expected)
    # non-inferiority: one-sided against -3 points
    ni = np.array([results["heat"][str(s)] - results["attention"][str(s)] for s in range(12)])
    assert rows[1]["p"] == pytest.approx(stats.ttest_1samp(ni + 3, 0, alternative="greater").pvalue)
    assert rows[0]["decided"] and rows[1]["decided"]


def _fields(**changes: dict) -> dict:
    fields = {
        "pointwise": {"seen_px": 4, "seen_side_px": 2, "computed_side_px": 2},
        **{a: {"seen_px": 300, "seen_side_px": 18, "computed_side_px": 26} for a in pf.LOCAL},
        **{a: {"seen_px": 1024, "seen_side_px": 32, "computed_side_px": 32} for a in pf.GLOBAL},
    }
    for arm, change in changes.items():
        fields[arm] = {**fields[arm], **change}
    return fields


def test_each_receptive_field_condition_fails_loudly() -> None:
    assert pf.field_conditions(_fields(), 32) == []
    assert "pointwise sees 16 px" in pf.field_conditions(_fields(pointwise={"seen_px": 16}), 32)[0]
    assert pf.field_conditions(_fields(dwconv={"seen_side_px": 32, "computed_side_px": 32}), 32) == [
        "local arm dwconv sees the whole image"
    ]
    assert pf.field_conditions(_fields(heat={"seen_px": 1000}), 32) == ["global arm heat does not see every pixel"]
    assert "more than its layout" in pf.field_conditions(_fields(avgpool={"seen_side_px": 30}), 32)[0]


def test_the_computed_fields_follow_the_layout() -> None:
    model = pf.build("dwconv")
    assert pf.computed_side("pointwise", model, 32) == 2
    assert len(model.stages[0].blocks) == pf.DEPTH
    assert pf.computed_side("dwconv", model, 32) == 2 * (2 * pf.DEPTH + 1)
    assert pf.computed_side("attention", model, 32) == 32


def test_the_local_field_is_smaller_than_the_dots_least_distance() -> None:
    """A local arm's token (its side from the layout, and the side its gradient reaches at initialisation) never
    reaches a pixel of both dots: the dots' centres are at least ``dot_distance`` apart, so in x or y at least that over
    the square root of 2, more than the field
    and two radii; on drawn images the share of images where one local field reaches both dots is 0."""
    side = max(pf.computed_side(a, pf.build(a), 32) for a in pf.LOCAL)
    assert side + 2 * pf.CONFIG.dot_radius < pf.CONFIG.dot_distance / 2**0.5
    images = torch.zeros(1, 3, 32, 32, dtype=torch.float64)
    images[..., 10:22, 10:22] = 1.0
    erf = pf.centre_erf(pf.build("dwconv"), images)
    ys, xs = np.nonzero(erf > pf.SUPPORT * erf.max())
    assert max(np.ptp(ys), np.ptp(xs)) + 1 <= side
    # images of the study's settings: the dot_distance holds, and so does the share
    drawn = make_pathfinder(0, "val", 32, pf.CONFIG)
    assert pf.path_extent(drawn, side)["dots_within_one_local_field"] == 0.0
    # the measure counts: with a field as wide as the image every image has both dots in one
    assert pf.path_extent(drawn, 32)["dots_within_one_local_field"] == 1.0


def test_a_shortcut_a_local_field_over_both_dots_and_an_unaffordable_pilot_each_fail_the_check() -> None:
    record = {
        "receptive_fields": _fields(),
        "config": {"size": 32},
        "path_extent": {"dots_within_one_local_field": 0.0},
        "plan": {"pilot_core_hours": 10.0, "budget_core_hours": 40.0},
        "shortcuts": {"geometry": pf.binomial(5300, 10_000), "local_cnn_7px": pf.binomial(5050, 10_000)},
    }
    assert pf.failures(record) == ["shortcut geometry: 53.0% on 10000 images is beyond binomial noise"]
    record["shortcuts"]["geometry"] = pf.binomial(5000, 10_000)
    assert pf.failures(record) == []
    record["path_extent"]["dots_within_one_local_field"] = 0.01  # any image at all fails the check
    record["plan"]["pilot_core_hours"] = 41.0
    assert pf.failures(record) == [
        "a local arm's token sees both dots in 1% of the images: not local to the task",
        "the pilot alone costs more than the budget",
    ]


def test_the_report_is_the_records(tmp_path: Path, monkeypatch, capsys) -> None:
    record = json.loads(pf.RECORD.read_text())
    monkeypatch.setattr(pf, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(pf, "REPORT", tmp_path / "r.md")
    pf.write_record(pf.RECORD, record)
    assert pf.main(["--report-only"]) == (1 if record["failures"] else 0)
    text = pf.REPORT.read_text()
    for arm, r in record["receptive_fields"].items():
        row = re.search(rf"^\| {arm} \| ([\d,]+) \| (\d+) \| (\d+) \| (\d+) \|", text, re.M)
        assert row is not None, arm
        assert [int(g.replace(",", "")) for g in row.groups()] == [
            r["params"],
            r["computed_side_px"],
            r["seen_px"],
            r["seen_side_px"],
        ]
    for name, s in record["shortcuts"].items():
        assert f"| {name} | {100 * s['accuracy']:.2f}% |" in text
    assert f"{record['plan']['core_hours_per_seed']:.1f} core-hours per seed" in text


def test_bad_use_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    assert pf.main([]) == 2
    monkeypatch.setattr(pf, "RECORD", tmp_path / "none.json")
    assert pf.main(["--report-only"]) == 2
    assert pf.main(["--power", str(tmp_path / "missing.json")]) == 2
    assert pf.main(["--depth", "3"]) == 2  # a probe's setting without a probe
    assert pf.main(["--probe", "resnet18", "--depth", "3"]) == 2  # a reference has its own depth
    assert pf.main(["--testbed", "lra10-iso"]) == 2  # the check and the pilot run on the study's testbed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 6 and all(line.startswith("pathfinder_flat:") for line in err)
    bad = (["nope"], ["heat", "--depth", "0"], ["heat", "--lr", "nan"], ["heat", "--images", "x"])
    for argv in (*bad, ["heat", "--testbed", "x"]):
        with pytest.raises(SystemExit) as exit_:
            pf.main(["--probe", *argv])
        assert exit_.value.code == 2
        assert "error: argument" in capsys.readouterr().err  # argparse names the flag and why


def test_a_probe_is_keyed_by_every_setting_and_flagged_by_the_ones_it_changed() -> None:
    study = pf.STUDY_TESTBED
    assert pf.probe_key("heat", 2, 1000, 16000, 10, None, study) == f"heat/d2/1000/{study}/16000/e10"
    assert pf.probe_key("heat", 6, 1000, 32000, 30, 2.5e-4, "lra10-iso") == "heat/d6/1000/lra10-iso/32000/e30/lr0.00025"
    r = {"arm": "heat", "depth": 6, "train_images": 32000, "epochs": 30, "lr": 2.5e-4, "testbed": pf.STUDY_TESTBED}
    assert pf.probe_flags(r) == "--probe heat --depth 6 --images 32000 --epochs 30 --lr 0.00025"
    # another testbed: named in the flags
    assert pf.probe_flags({**r, "testbed": "lra10-iso"}).startswith("--probe heat --testbed lra10-iso --depth 6")
    assert pf.probe_flags({**r, "depth": pf.DEPTH, "train_images": pf.RUN["train_images"], "lr": None}) == (
        "--probe heat --epochs 30"
    )
    # a reference model outside the skeleton: no depth in its key, its flags or its line of the report
    assert (
        pf.probe_key("resnet18", pf.DEPTH, 1000, 64000, 16, 2.5e-4, study)
        == f"resnet18/1000/{study}/64000/e16/lr0.00025"
    )
    ref = {**r, "arm": "resnet18", "depth": None, "seed": 1000, "generator_version": pf.VERSION}
    ref |= {"val_top1": [50.0, 61.0], "train_loss": [0.69, 0.6], "seconds": 10.0}
    assert pf.probe_flags(ref) == "--probe resnet18 --images 32000 --epochs 30 --lr 0.00025"
    (line,) = [x for x in pf.probe_report({"probes": {"k": ref}}) if x]
    flags = "--probe resnet18 --images 32000 --epochs 30 --lr 0.00025"
    assert line.startswith(f"- `{flags}`: resnet18 (a reference) on `{pf.STUDY_TESTBED}`, ")
    assert "past 60% at epoch 2" in line


def _pilot_record(curves: dict[str, list[list[float]]], seconds: float = 600.0) -> dict:
    runs = {
        f"{arm}/{seed}": {"arm": arm, "seed": seed, "val_top1": curve, "seconds": seconds}
        for arm, by_seed in curves.items()
        for seed, curve in zip(pf.PILOT_SEEDS, by_seed, strict=True)
    }
    return {"plan": {"budget_core_hours": 40.0}, "pilot": {"run": pf.RUN, "seeds": list(pf.PILOT_SEEDS), "runs": runs}}


def test_the_pilot_plan_reads_final_accuracies_escapes_hours_and_what_stays_decidable() -> None:
    rng = np.random.default_rng(2)
    curves = {arm: [[50.0, 55.0, float(70 + i + rng.normal(0, 0.5))] for i in range(3)] for arm in pf.STUDY_ARMS}
    curves["dwconv"] = [[50.0, 51.0, 52.0]] * 3  # never leaves chance
    curves["wave"] = [[50.0, 62.0, float(70 + i + 10 * (-1) ** i)] for i in range(3)]  # a wide spread against heat
    plan = pf.pilot_plan(_pilot_record(curves))
    assert plan["accuracy"]["heat"] == {str(s): c[-1] for s, c in zip(pf.PILOT_SEEDS, curves["heat"], strict=True)}
    assert plan["escape_epochs"]["heat"] == [3, 3, 3] and plan["escape_epochs"]["wave"] == [2, 2, 2]
    assert plan["escape_epochs"]["dwconv"] == [None, None, None]
    runs = 3 * len(pf.STUDY_ARMS)
    assert plan["core_hours"] == pytest.approx(runs * 600 / 3600)
    assert plan["core_hours_per_seed"] == pytest.approx(len(pf.STUDY_ARMS) * 600 / 3600)
    assert plan["reported_seeds_affordable"] == (40 * 3600 - runs * 600) // (len(pf.STUDY_ARMS) * 600)
    # wave against heat: paired differences of sd about 10 points need more seeds than the budget pays
    assert plan["contrasts"]["wave vs heat"]["seeds_needed"] > plan["reported_seeds_affordable"]
    assert "wave vs heat" not in plan["decidable"] and "heat vs its pass-through" in plan["decidable"]


def test_a_pilot_cut_short_reports_its_runs_and_plans_nothing() -> None:
    record = _pilot_record({"heat": [[50.0, 50.2, 51.0], [50.0, 64.0, 70.0], [50.0, 50.0, 50.0]]})
    plan = pf.pilot_plan(record)
    assert plan["runs"] == 3 and plan["left_chance"] == 1 and plan["escape_epochs"]["heat"] == [None, 2, None]
    assert "contrasts" not in plan and "decidable" not in plan
    text = "\n".join(pf.pilot_report(record))
    assert "3 runs of 15" in text and "1 of the 3 passed 60%" in text and "The pilot is not complete" in text
    assert "No run has left chance" not in text
    at_chance = _pilot_record({"heat": [[50.0, 51.0]] * 3})
    at_chance["probes"] = {
        "heat/d6/1000/lr0.00025": {
            "arm": "heat",
            "depth": 6,
            "seed": 1000,
            "train_images": pf.RUN["train_images"],
            "epochs": 3,
            "lr": 2.5e-4,
            "val_top1": [50.0, 61.7, 50.0],
            "train_loss": [0.6931, 0.69, 0.6929],
            "seconds": 600.0,
            "testbed": pf.STUDY_TESTBED,
        }
    }
    assert "No run has left chance" in "\n".join(pf.pilot_report(at_chance))
    text = "\n".join(pf.probe_report(at_chance))
    assert (
        f"- `--probe heat --depth 6 --epochs 3 --lr 0.00025`: heat at 6 blocks on `{pf.STUDY_TESTBED}`, "
        f"{pf.RUN['train_images']:,} training images, 3 epochs, peak rate 0.00025, seed 1000, generator version 3: "
        "50.00% after its last epoch, at most 61.70%, "
        "past 60% at epoch 2, 600 s; training loss 0.6900 at its lowest (ln 2 = 0.6931)." in text
    )


def test_the_report_tells_a_reference_that_learnt_the_testbed_from_a_skeleton_at_chance() -> None:
    """A reference past 60% says the testbed can be learnt from its number of images; it does not count as the
    skeleton leaving chance."""
    record = json.loads(pf.RECORD.read_text())
    probe = {
        "seed": 1000,
        "epochs": 2,
        "lr": 2.5e-4,
        "train_loss": [0.69, 0.6],
        "seconds": 9.0,
        "testbed": "lra10-iso",
    }
    probe["config"] = asdict(pf.TESTBEDS["lra10-iso"])
    record["probes"] = {
        "heat/d2/1000/64000": {**probe, "arm": "heat", "depth": 2, "train_images": 64000, "val_top1": [50.0, 50.4]},
        "resnet18/1000/64000": {**probe, "arm": "resnet18", "depth": None, "train_images": 64000, "val_top1": [51, 62]},
        "resnet18/1000": {**probe, "arm": "resnet18", "depth": None, "train_images": 4000, "val_top1": [50.0, 52.2]},
        "heat/d2/1000": {**probe, "arm": "heat", "depth": 2, "train_images": 4000, "val_top1": [50.0, 70.0]},
    }
    retired = {
        **asdict(pf.LRA_32),
        "n_dashes": 10,
        "n_distractors": 2,
        "max_turn": 30.0,
        "dot_span": 13.5,
    }  # as recorded
    retired.pop("dot_distance"), retired.pop("isotropic")
    record["probes"]["heat/d2/1000"].update(testbed="straight10", config=retired)
    text = pf.report(record)
    assert (
        "`lra10-iso`: no probe of the skeleton has passed 60%" in text
    )  # a skeleton past 60% elsewhere does not count
    assert "`straight10`: no probe" not in text
    record["probes"]["heat/d2/1000"]["arm"] = "resnet18"  # no probe of the skeleton on straight10: nothing said of it
    assert "`straight10`: no probe" not in pf.report(record)
    record["probes"]["heat/d2/1000"]["arm"] = "heat"
    assert "`lra10-iso`: a reference passed 60% on 64,000 training images: the testbed can be learnt" in text
    # each testbed's knobs apart from LRA's
    assert "- `straight10`: n_dashes 10, n_distractors 2, max_turn 30, dot_span 13.5 (the rest as `LRA_32`)" in text
    assert "- `lra10-iso`: n_dashes 10, n_distractors 2, dot_distance 19, isotropic (the rest as `LRA_32`)" in text
    assert (
        f"Testbed: `{pf.testbed_of(record['config'], record)}`, generator version 4: " in text
    )  # the check's, by its verdict
    record["probes"]["heat/d2/1000/64000"]["val_top1"] = [50.0, 61.0]
    assert "`lra10-iso`: no probe of the skeleton" not in pf.report(record)


def test_the_pilots_report_is_its_record(tmp_path: Path, monkeypatch) -> None:
    record = json.loads(pf.RECORD.read_text())
    curves = {arm: [[50.0, 61.0 + i + (arm == "wave") * i * i] for i in range(3)] for arm in pf.STUDY_ARMS}
    record.update(_pilot_record(curves), plan={**record["plan"], "budget_core_hours": 40.0})
    monkeypatch.setattr(pf, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(pf, "REPORT", tmp_path / "r.md")
    pf.write_record(pf.RECORD, record)
    pf.main(["--report-only"])
    text = pf.REPORT.read_text()
    assert "## The pilot (selection seeds, never reported)" in text and pf.NOT_RUN not in text
    assert "| heat | 61.00 | 62.00 | 63.00 | 2, 2, 2 |" in text
    plan = pf.pilot_plan(record)
    for name, r in plan["contrasts"].items():
        assert f"| {name} | 3 | {r['sd_paired']:.2f} | {r['seeds_needed']} |" in text


def test_each_result_is_stored_into_the_record_as_it_is_on_disk(tmp_path: Path, monkeypatch) -> None:
    """The pilot and a probe write one entry each into the record read again, so runs side by side (a check, the
    pilot, a probe) keep what the others wrote."""
    monkeypatch.setattr(pf, "RECORD", tmp_path / "r.json")
    pf.write_record(pf.RECORD, {"shortcuts": {"x": 1}, "probes": {"heat/d6/1000": {"seconds": 1.0}}})
    pf.store("pilot", "heat/1000", {"seconds": 2.0})
    pf.store("probes", "heat/d2/1000/16000", {"seconds": 3.0})
    record = json.loads(pf.RECORD.read_text())
    assert record["shortcuts"] == {"x": 1}
    assert record["pilot"]["runs"] == {"heat/1000": {"seconds": 2.0}} and record["pilot"]["run"] == pf.RUN
    assert set(record["probes"]) == {"heat/d6/1000", "heat/d2/1000/16000"}


def test_a_new_check_keeps_only_the_runs_of_its_generator_version_and_testbed() -> None:
    config = asdict(pf.CONFIG)
    old, new = {"generator_version": pf.VERSION - 1}, {"generator_version": pf.VERSION}
    probe = {**new, "testbed": pf.STUDY_TESTBED, "config": config}
    other = {**new, "testbed": "lra10-iso", "config": asdict(pf.TESTBEDS["lra10-iso"])}
    changed = {**other, "config": {**other["config"], "n_dashes": 3}}  # its testbed's knobs changed since
    retired = {**other, "testbed": "lra14", "config": {**other["config"], "dot_span": 13.5}}  # nothing draws it now
    before = {
        "config": config,
        "probes": {
            "heat/d2/1000": {**probe, **old},
            "heat/d6/1000/lr0.00025": probe,
            "a": other,
            "b": changed,
            "c": retired,
        },
        "pilot": {"run": pf.RUN, "seeds": [1000], "runs": {"heat/1000": old}},
    }
    assert pf.same_design_runs(before, config) == {
        "probes": {"heat/d6/1000/lr0.00025": probe, "a": other, "c": retired}
    }
    before["pilot"]["runs"]["wave/1000"] = new
    assert pf.same_design_runs(before, config)["pilot"]["runs"] == {"wave/1000": new}
    # another study testbed: the pilot's runs go, the probes (each on its own testbed) stay
    assert pf.same_design_runs(before, {**config, "dot_distance": 0.0}) == {
        "probes": {"heat/d6/1000/lr0.00025": probe, "a": other, "c": retired}
    }


def test_a_check_on_another_testbed_keeps_the_earlier_checks_verdict_and_shortcuts() -> None:
    """A failed testbed stays in the record (its verdict and shortcut accuracies), once per testbed and version."""
    old = {
        "config": asdict(pf.TESTBEDS["lra10-iso"]),
        "generator_version": pf.VERSION,
        "failures": ["shortcut local_cnn_7px: 54.8% on 10000 images is beyond binomial noise"],
        "shortcuts": {"local_cnn_7px": {"accuracy": 0.548, "p_value": 1e-21, "n": 10000, "ci99": [0.53, 0.56]}},
        "path_extent": {"dots_within_one_local_field": 0.0},
    }
    study = asdict(pf.CONFIG)
    (kept,) = pf.earlier_checks(old, study)
    assert kept["testbed"] == "lra10-iso" and kept["failures"] == old["failures"]
    assert kept["shortcuts"] == {"local_cnn_7px": {"accuracy": 0.548, "p_value": 1e-21, "n": 10000}}
    assert pf.earlier_checks(old, old["config"]) == []  # the same testbed checked again: the new check replaces it
    again = {**old, "earlier_checks": [kept], "failures": []}  # lra10-iso checked again, then another testbed
    assert [c["failures"] for c in pf.earlier_checks(again, study)] == [[]]
    back = {**again, "config": study, "earlier_checks": [kept]}  # the study's testbed, lra10-iso's check kept
    # lra10-iso checked once more: its own earlier entry goes (the new record holds it), the study's testbed's comes in
    assert [c["testbed"] for c in pf.earlier_checks(back, old["config"])] == [pf.STUDY_TESTBED]
    record = {**json.loads(pf.RECORD.read_text()), "earlier_checks": [kept]}
    assert (
        "- `lra10-iso`, generator version 4: failed; local_cnn_7px 54.80% (p 1e-21) on 10,000 test images."
        in pf.report(record)
    )


def _drawn(paths: np.ndarray, dots: list[list[float]]) -> SimpleNamespace:
    """Synthetic images for the placement measures: path maps (n, size, size) whose path 1 carries both dots, at
    ``dots`` in every image; odd images positive."""
    n = len(paths)
    return SimpleNamespace(
        paths=paths,
        dots=np.tile(np.array(dots), (n, 1, 1)),
        dot_paths=np.ones((n, 2), dtype=np.int64),
        labels=np.arange(n) % 2,
    )


def test_axis_alignment_reads_the_dots_axis_and_the_first_paths_direction_by_label() -> None:
    """Dots along x in every image; the first dot's path leaves along x in the positives and along the diagonal in
    the negatives: the axis share is 1, the path's 0 for negatives and 1 for positives; on the generator's own
    images each share is a number between 0 and 1."""
    n, size = 4, 32
    paths = np.zeros((n, size, size), dtype=np.int8)
    for i in range(n):
        for t in range(12):
            x, y = (6 + t, 10) if i % 2 else (6 + t, 10 + t)  # positives horizontal, negatives diagonal
            paths[i, y, x] = 1
    drawn = _drawn(paths, [[6.0, 10.0], [26.0, 10.0]])
    a = pf.axis_alignment(drawn)
    assert a["dots_axis_along_image_axis"] == 1.0
    assert a["path_leaves_first_dot_along_image_axis"] == {"0": 0.0, "1": 1.0}
    line = pf.axis_line(a)
    assert "in 100.0% of the images" in line and "in 0.0% of the negatives and 100.0% of the positives" in line
    real = pf.axis_alignment(make_pathfinder(1, "val", 64, pf.CONFIG))
    assert 0 <= real["dots_axis_along_image_axis"] <= 1


def test_a_probe_trains_on_its_testbeds_images_and_the_check_keeps_each_testbed_apart(monkeypatch) -> None:
    """A probe's set has its testbed's knobs and its number of training images (the study's own set at the study's
    settings); the check's cached images are named by the testbed's knobs, so changed knobs are drawn again."""
    monkeypatch.setattr(pf, "PATHFINDER_SETS", dict(pf.PATHFINDER_SETS))  # the sets a probe registers stay here
    assert pf.probe_set(pf.STUDY_TESTBED, pf.RUN["train_images"]) == pf.STUDY_SET
    name = pf.probe_set("lra10-iso", 500)
    spec = pf.PATHFINDER_SETS[name]
    assert (spec.config, spec.n_train, spec.seed) == (pf.TESTBEDS["lra10-iso"], 500, pf.SEED)
    assert spec.n_val == pf.PATHFINDER_SETS[pf.STUDY_SET].n_val
    before = pf._cache_name("test", 10)
    monkeypatch.setattr(pf, "CONFIG", replace(pf.CONFIG, n_dashes=pf.CONFIG.n_dashes + 1))  # same name, new knobs
    assert pf._cache_name("test", 10) != before


def test_a_testbeds_name_keeps_its_knobs_in_the_record() -> None:
    """A probe's key and the record name a testbed: every probe and check of the record on a testbed of
    :data:`TESTBEDS` had the knobs it has now (a testbed whose knobs change takes a new name; the old one retires
    with its runs, which keep their knobs)."""
    record = json.loads(pf.RECORD.read_text())
    runs = [*record["probes"].values(), *record.get("earlier_checks", [])]
    runs.append({"testbed": pf.testbed_of(record["config"], record), "config": record["config"]})
    for r in runs:
        if r["testbed"] in pf.TESTBEDS:
            assert r["config"] == asdict(pf.TESTBEDS[r["testbed"]]), r["testbed"]
    assert {r["testbed"] for r in runs} - set(pf.TESTBEDS), "the retired testbeds' runs stay in the record"


def test_straightness_reads_how_straight_each_dots_path_runs_by_label() -> None:
    """Positives' paths run straight out of both dots, negatives' turn a corner 3 px out: the positives' share is 1,
    the negatives' below it, at both dots, and the report says so."""
    n, size = 8, 32
    paths = np.zeros((n, size, size), dtype=np.int8)
    for i in range(n):
        for start, step in (((4, 10), 1), ((27, 10), -1)):  # out of each dot, towards the middle
            for t in range(8):
                bend = i % 2 == 0 and t > 3  # negatives: up after 3 px
                x, y = start[0] + step * min(t, 3 if bend else t), start[1] - (t - 3 if bend else 0)
                paths[i, y, x] = 1
    drawn = _drawn(paths, [[4.0, 10.0], [27.0, 10.0]])
    s = pf.straightness(drawn)
    for dot in ("first_dot", "second_dot"):
        assert s[dot]["1"] == pytest.approx(1.0) and s[dot]["0"] < 0.95 and s[dot]["p_value"] < 0.05
    assert "first dot " + f"{s['first_dot']['0']:.4f} / 1.0000" in pf.straight_line(s)
