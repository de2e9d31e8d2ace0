"""A checkpoint remembers the embedded set it was trained on: `eval` without --data uses that set, not the digits
(the scenes set has the digits' class names, so evaluating on the wrong one would pass every check silently)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from pdevision.data.embedded import embedded_data_of
from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.classify.evaluate import evaluate_checkpoint


def test_embedded_data_of_accepts_only_embedded_names() -> None:
    assert embedded_data_of({"data": "scenes"}) == "scenes"
    assert embedded_data_of({"data": "digits"}) == "digits"
    assert embedded_data_of({}) is None
    assert embedded_data_of({"data": "/etc"}) is None
    assert embedded_data_of({"data": ["scenes"]}) is None


def _checkpoint(root: Path, data: str | None) -> Path:
    torch.manual_seed(0)
    model = create_model("pderesnet_micro", num_classes=10, img_size=32)
    meta = {
        "model": "pderesnet_micro",
        "classes": [str(c) for c in range(10)],
        "img_size": 32,
        "model_args": {"img_size": 32},
        "mean": list(IMAGENET_DEFAULT_MEAN),
        "std": list(IMAGENET_DEFAULT_STD),
    }
    if data is not None:
        meta["data"] = data
    return save_checkpoint(root, "best", model, meta)


@pytest.mark.slow
def test_eval_defaults_to_the_checkpoints_embedded_set(tmp_path: Path) -> None:
    on_scenes = evaluate_checkpoint(_checkpoint(tmp_path / "a", "scenes"), output=tmp_path / "ea", device="cpu")
    on_digits = evaluate_checkpoint(_checkpoint(tmp_path / "b", None), output=tmp_path / "eb", device="cpu")
    # the embedded val splits differ in size: 1,000 scenes against 360 digits (20% of 1,797)
    assert on_scenes["images"] == 1000
    assert on_digits["images"] == 360
    explicit = evaluate_checkpoint(tmp_path / "a" / "best", data="digits", output=tmp_path / "ec", device="cpu")
    assert explicit["images"] == 360


def test_eval_and_int8_export_use_the_runs_own_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run trained on a folder was evaluated on the embedded digits (and refused for its classes), and
    ``export --int8`` asked for --data again (issue 55): both read the data from the run's config.json."""
    import json
    import shutil

    from PIL import Image

    from pdevision.cli import main

    data = tmp_path / "named"
    for c, name in enumerate(("cat", "dog")):
        (data / name).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (32, 32), (200 * c, 20 * i, 90)).save(data / name / f"{i}.png")
    run = tmp_path / "run"
    argv = ["train", "--data", str(data), "--val-split", "0.3", "--epochs", "1", "--img-size", "32"]
    assert main([*argv, "--batch-size", "4", "--max-train-batches", "1", "--output", str(run), "--no-progress"]) == 0
    assert main(["eval", "--checkpoint", str(run)]) == 0, capsys.readouterr().err
    result = json.loads((run / "eval-best" / "eval.json").read_text())
    assert result["classes"] == ["cat", "dog"] and result["images"] == 6  # the run's split: 30% of 20
    assert main(["export", str(run), "--format", "hub", "--output", str(tmp_path / "hub"), "--int8"]) == 0
    assert "int8: top-1" in capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(run), "--data", "digits", "--output", str(tmp_path / "e")]) == 2
    assert "classes" in capsys.readouterr().err  # --data names other data: the digits' ten classes are refused
    shutil.move(data, tmp_path / "moved")
    assert main(["eval", "--checkpoint", str(run), "--output", str(tmp_path / "e2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"records the run's data {data}, which is not here" in err[0]
