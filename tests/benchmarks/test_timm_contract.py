"""benchmarks/timm_contract: which models it runs timm's tests on, how it reads pytest's report, what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.timm_contract import timm_contract as tc

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="test_models" name="test_model_forward[1-vheat_micro]" time="1.0"/>
<testcase classname="test_models" name="test_model_forward_fx[1-vheat_micro]" time="1.0">
  <failure message="assert tensor(False)">trace</failure></testcase>
<testcase classname="test_models" name="test_model_backward_fx[2-hcnet_micro]" time="1.0">
  <failure message="RuntimeError: boom&#10;second line">trace</failure></testcase>
<testcase classname="test_models" name="test_model_default_cfgs[1-pderesnet50_eq4.untrained]" time="1.0">
  <skipped message="Fixed input size model &gt; limit."/></testcase>
</testsuite></testsuites>"""


def test_our_models_are_the_families_in_timms_registry() -> None:
    ours = tc.our_models()
    assert "vheat_micro" in ours and "pderesnet50_eq4" in ours and "hcnet_base" in ours
    assert not any(n.startswith(("vheatir", "swinir", "dncnn", "resnet")) for n in ours)


def run_info(n: int) -> dict[str, object]:
    return {
        "date": "2026-01-01",
        "commit": f"c{n}",
        "source": "timm source 1.0.0",
        "installed": "timm, torch",
        "cases": 0,
        "wall_s": 60.0,
        "load": "1.0",
        "pytest": f"run {n}",
    }


def test_report_counts_and_failures(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    rows = tc.parse(junit, tc.our_models())
    assert [(r["test"], r["model"], r["outcome"]) for r in rows] == [
        ("test_model_forward", "vheat_micro", "passed"),
        ("test_model_forward_fx", "vheat_micro", "failed"),
        ("test_model_backward_fx", "hcnet_micro", "failed"),
        ("test_model_default_cfgs", "pderesnet50_eq4", "skipped"),
    ]
    models = ["hcnet_micro", "pderesnet50_eq4", "vheat_micro"]
    text = tc.markdown(tc.merge({}, run_info(1), rows, models, []), models)
    assert "| test_model_forward_fx | 0 | 1 | 0 | 0 | 1 |" in text
    assert "| **all** | **1** | **2** | **1** | **0** | |" in text
    assert "Failures: 2, of which not known: 2." in text
    assert "| test_model_backward_fx | hcnet_micro | RuntimeError: boom |  | 1 |" in text  # first line of the message


def test_a_subset_run_replaces_only_its_rows_and_names_its_run() -> None:
    models = ["hcnet_micro", "vheat_micro"]
    first = [
        {"test": t, "model": m, "outcome": "failed" if (t, m) == ("fx", "vheat_micro") else "passed", "message": "x"}
        for t in ("fwd", "fx")
        for m in models
    ]
    record = tc.merge({}, run_info(1), first, models, [])
    again = [{"test": "fx", "model": "vheat_micro", "outcome": "passed", "message": ""}]
    record = tc.merge(record, run_info(2), again, models, [])
    by_case = {(r["test"], r["model"]): (r["outcome"], r["run"]) for r in record["rows"]}
    assert by_case == {
        ("fwd", "hcnet_micro"): ("passed", "1"),
        ("fwd", "vheat_micro"): ("passed", "1"),
        ("fx", "hcnet_micro"): ("passed", "1"),
        ("fx", "vheat_micro"): ("passed", "2"),
    }
    assert sorted(record["runs"]) == ["1", "2"]
    text = tc.markdown(record, models)
    assert "| fx | 2 | 0 | 0 | 0 | 1, 2 |" in text and "| 2 | 2026-01-01 | c2 |" in text
    # a run that replaces every row of an earlier one leaves that run out of the record
    record = tc.merge(record, run_info(3), [{**r, "run": None} for r in first], models, [])
    assert sorted(record["runs"]) == ["3"]


def test_our_families_join_timms_jit_exclusions() -> None:
    """TorchScript is left out as timm leaves out its own non-scriptable models: our patterns join timm's
    EXCLUDE_JIT_FILTERS, which parametrise exactly its TorchScript tests; stored rows of those cases are dropped."""
    text = (
        "import pytest\n"
        "EXCLUDE_JIT_FILTERS = [\n    'hiera_*',\n]\n"
        "@pytest.mark.parametrize('model_name', list_models(exclude_filters=EXCLUDE_FILTERS + EXCLUDE_JIT_FILTERS))\n"
        "def test_model_forward_torchscript(model_name):\n    pass\n"
        "@pytest.mark.parametrize('model_name', list_models(exclude_filters=EXCLUDE_FILTERS))\n"
        "def test_model_forward(model_name):\n    pass\n"
    )
    patched = tc.add_jit_exclusions(text)
    namespace: dict[str, object] = {}
    exec(compile(patched.split("@pytest")[0], "test_models.py", "exec"), namespace)
    assert namespace["EXCLUDE_JIT_FILTERS"] == [*tc.EXCLUDE_JIT_FILTERS, "hiera_*"]
    assert tc.jit_tests(text) == ["test_model_forward_torchscript"]
    assert all(tc.is_jit_excluded(m) for m in tc.our_models())
    rows = [{"test": "test_model_forward_torchscript", "model": "vheat_micro", "outcome": "failed", "message": ""}]
    record = tc.merge({}, run_info(1), rows, ["vheat_micro"], ["test_model_forward_torchscript"])
    assert record["rows"] == []
    assert "| test_model_forward_torchscript | 0 | 0 | 0 | 1 | - |" in tc.markdown(
        {**record, "runs": {}}, ["vheat_micro"]
    )
    with pytest.raises(SystemExit, match="expected one `EXCLUDE_JIT_FILTERS"):
        tc.add_jit_exclusions("EXCLUDE_FILTERS = []\n")


def test_a_folder_that_is_not_a_timm_checkout_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither a timm source checkout"):
        tc.read_test_file(tmp_path)
