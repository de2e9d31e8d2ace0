"""pdeformer_micro with a PDE mixer as the backbone of every task of the loop: segmentation, detection and
QB-Heat pretraining from the command line, each rebuilt from its own checkpoint (the mixer kept in it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from pdevision.cli import main
from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
from pdevision.models.pdeformer import MIXERS
from pdevision.tasks.pretrain import load_encoder
from tests.data.test_dense_data import _coco, _write_mask_folder


def _args(mixer: str) -> list[str]:
    return ["--model", "pdeformer_micro", "--model-args", json.dumps({"mixer": mixer, "dims": 8, "depths": [1] * 4})]


def _photo(path: Path) -> Path:
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)).save(path)
    return path


def test_segment_with_the_hcnet_mixer_and_predict_from_its_checkpoint(tmp_path: Path) -> None:
    _write_mask_folder(tmp_path / "masks", n=6, size=(40, 48))
    out = tmp_path / "seg"
    argv = ["train", "--task", "segment", "--head", "fpn", *_args("hcl"), "--epochs", "1", "--data", tmp_path / "masks"]
    assert (
        main([str(a) for a in [*argv, "--img-size", "32", "--batch-size", "2", "--output", out, "--no-progress"]]) == 0
    )
    assert read_meta(resolve_checkpoint(str(out)))["model_args"]["mixer"] == "hcl"
    pred = tmp_path / "pred"
    assert main(["predict", "--checkpoint", str(out), str(_photo(tmp_path / "p.png")), "--output", str(pred)]) == 0
    labels = np.asarray(Image.open(pred / "p_labels.png"))
    assert labels.shape == (37, 53) and labels.max() < 3


def test_detect_with_the_hyperbolic_mixer(tmp_path: Path) -> None:
    _coco(tmp_path / "coco", "train")
    _coco(tmp_path / "coco", "val")
    out = tmp_path / "det"
    argv = ["train", "--task", "detect", "--head", "faster_rcnn", *_args("hyperbolic"), "--epochs", "1"]
    argv += ["--data", tmp_path / "coco", "--batch-size", "2", "--img-size", "64", "--output", out, "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"best_val_map", "best_val_map50"} <= set(summary)
    assert read_meta(resolve_checkpoint(str(out)))["model_args"]["mixer"] == "hyperbolic"
    pred = tmp_path / "pred"
    assert main(["predict", "--checkpoint", str(out), str(_photo(tmp_path / "p.jpg")), "--output", str(pred)]) == 0
    assert isinstance(json.loads((pred / "predictions.json").read_text()), list)


@pytest.mark.parametrize("mixer", ["heat", pytest.param("wave", marks=pytest.mark.slow)])
def test_qbheat_pretraining_exports_a_pdeformer_encoder(tmp_path: Path, mixer: str) -> None:
    out = tmp_path / "pre"
    argv = ["pretrain", *_args(mixer), "--data", "digits", "--img-size", "64", "--epochs", "1", "--batch-size", "8"]
    argv += ["--crops-per-epoch", "16", "--output", out, "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    encoder, meta = load_encoder(out / "encoder")
    assert meta["model"] == "pdeformer_micro" and meta["model_args"]["mixer"] == mixer
    assert isinstance(encoder.stages[2].blocks[0].token_mixer, MIXERS[mixer])
    assert encoder(torch.randn(1, 3, 64, 64)).shape[0] == 1
