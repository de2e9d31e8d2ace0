"""benchmarks/timm_contract.py: which models it runs timm's tests on, how it reads pytest's report, what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import load_benchmark

tc = load_benchmark("timm_contract.py")

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


def test_report_counts_and_marks_known_failures(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    rows = tc.parse(junit, tc.our_models())
    assert [(r["test"], r["model"], r["outcome"]) for r in rows] == [
        ("test_model_forward", "vheat_micro", "passed"),
        ("test_model_forward_fx", "vheat_micro", "failed"),
        ("test_model_backward_fx", "hcnet_micro", "failed"),
        ("test_model_default_cfgs", "pderesnet50_eq4", "skipped"),
    ]
    text = tc.markdown(rows, "timm source 1.0.0", ["hcnet_micro", "vheat_micro"], 60.0, "2 failed")
    assert "| test_model_forward_fx | 0 | 1 | 0 |" in text
    assert "| **all** | **1** | **2** | **1** |" in text
    assert "Failures: 2, of which not known: 1." in text
    assert "| test_model_backward_fx | hcnet_micro | RuntimeError: boom |  |" in text  # first line of the message
    assert "owned by the export / compile rework" in text


def test_a_folder_that_is_not_a_timm_checkout_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither a timm source checkout"):
        tc.read_test_file(tmp_path)
