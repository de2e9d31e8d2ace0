"""A checkpoint remembers the embedded set it was trained on: `eval` without --data uses that set, not the digits
(the scenes set has the digits' class names, so evaluating on the wrong one would pass every check silently)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pdevision.data.embedded import embedded_data_of
from pdevision.engine.modeling import build_model
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
    model = build_model("pderesnet_micro", num_classes=10, img_size=32)
    meta = {
        "model": "pderesnet_micro",
        "classes": [str(c) for c in range(10)],
        "img_size": 32,
        "model_args": {"img_size": 32},
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
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
