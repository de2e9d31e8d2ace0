"""benchmarks/predict_speed: the arms it times, the record it keeps and the report made from that record."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import timm
from benchmarks.predict_speed import predict_speed

from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("speed") / "run"
    model = create_model("vheat_micro", num_classes=10, img_size=32)
    cfg = timm.data.resolve_data_config({}, model=model)
    meta = {"model": "vheat_micro", "classes": [str(i) for i in range(10)], "img_size": 32, "mean": cfg["mean"]}
    save_checkpoint(out, "best", model, {**meta, "model_args": {"img_size": 32}, "std": cfg["std"]})
    return out


def test_the_arms_run_the_same_checkpoint_and_images(run: Path, tmp_path: Path) -> None:
    args = argparse.Namespace(checkpoint=run, batch_size=32, threads=2, timm_inference=tmp_path / "inference.py")
    codes = predict_speed.arms(args, tmp_path / "images", tmp_path / "results")
    batched, single, reference = codes.values()
    assert "'--batch-size', '32'" in batched and "'--batch-size', '1', '--workers', '0'" in single
    for code in codes.values():
        assert str(tmp_path / "images") in code and code.index("pdevision") < code.index("perf_counter")
    weights = str(run / "best" / "model.safetensors")
    assert all(w in reference for w in (weights, "'--model', 'vheat_micro'", "'--img-size', '32'", "img_size=32"))
    assert "'--num-classes', '10'" in reference and "run_name='__main__'" in reference


def test_the_record_holds_no_path_of_the_machine() -> None:
    argv = ["--checkpoint", "/home/me/runs/demo", "--timm-inference", "/src/timm/inference.py", "--threads", "2"]
    assert predict_speed._public(argv) == "--checkpoint demo --timm-inference inference.py --threads 2"


@pytest.mark.slow
def test_a_tiny_run_writes_its_record_and_the_report_is_made_from_it(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(predict_speed, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(predict_speed, "OUT", tmp_path / "r.md")
    argv = ["--checkpoint", str(run), "--images", "4", "--repeats", "1", "--threads", "1", "--batch-size", "2"]
    assert predict_speed.main(argv) == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert len(record["data"]) == 2 and all(len(d["seconds"]) == 1 for d in record["data"].values())
    report = (tmp_path / "r.md").read_text()
    (tmp_path / "r.md").unlink()
    assert predict_speed.main(["--report-only"]) == 0 and (tmp_path / "r.md").read_text() == report
    assert str(tmp_path) not in report
