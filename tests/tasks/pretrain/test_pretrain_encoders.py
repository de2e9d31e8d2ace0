"""Pretraining QB-Heat and MAE on other encoders through the library and the command line: the exported encoder
fine-tunes, the published predictor through the config and the flags, embedded sets as data, refused encoders in
one line. (The models themselves: tests/models/test_qbheat_encoders.py and test_qbheat_published.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pdevision.cli import build_parser, main
from pdevision.data.crops import build_pretrain_dataset
from pdevision.engine import RunConfig
from pdevision.engine.checkpoint import read_meta
from pdevision.engine.modeling import create_model
from pdevision.models.qbheat import resolve_max_rate
from pdevision.tasks.pretrain import PretrainConfig, create_pretrainer, load_encoder, pretrain

VIT = "vit_tiny_patch16_224"
VIT_ARGS = {"patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 2, "global_pool": "avg"}


@pytest.mark.parametrize(("model", "args"), [(VIT, VIT_ARGS), ("resnet18", {})])
def test_tiny_pretraining_exports_an_encoder_that_fine_tunes(model: str, args: dict, tmp_path: Path) -> None:
    cfg = PretrainConfig(
        model=model,
        model_args=args,
        data="digits",
        img_size=64,
        crops_per_epoch=16,
        decoder_depth=1,
        decoder_width=32,
        decoder_heads=2,
        pred_dim=32,
        run=RunConfig(epochs=1, batch_size=8, output=str(tmp_path / "run"), progress=False, device="cpu"),
    )
    summary = pretrain(cfg)
    assert summary["steps"] == 2 and summary["status"] == "completed" and summary["final_loss"] > 0
    meta = read_meta(tmp_path / "run" / "encoder")
    assert meta["model"] == model and meta["model_args"] == {**args, "img_size": 64}
    encoder, _ = load_encoder(tmp_path / "run" / "encoder")
    fresh = create_model(model, num_classes=0, img_size=64, **args)
    assert set(encoder.state_dict()) == set(fresh.state_dict())  # an ordinary backbone, no QB-Heat parts
    assert encoder(torch.randn(1, 3, 64, 64)).shape[0] == 1


def test_published_form_through_the_config() -> None:
    assert create_pretrainer(PretrainConfig(constraint="none", decoder_depth=1)).predictor.max_rate is None
    assert create_pretrainer(PretrainConfig(decoder_depth=1)).predictor.max_rate == 0.25


def test_embedded_sets_as_pretraining_data() -> None:
    crops = build_pretrain_dataset("digits", 32, 10, [0.5] * 3, [0.5] * 3)
    assert len(crops) == 10 and crops[3][0].shape == (3, 32, 32) and crops[3][1] == 0
    assert len(crops.images) == 1437  # the training split only; more images than crops: drawn at random
    torch.manual_seed(0)
    first = torch.stack([crops[0][0] for _ in range(5)])
    assert not all(torch.equal(first[0], f) for f in first[1:])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "resnet18", "--img-size", "32"], "below resnet18's minimum input of 32 px"),
        (["--model", VIT, "--model-args", json.dumps({"depth": 1})], "QB-Heat's --stride must be its patch size"),
        (["--method", "mae", "--model", "resnet18"], "MAE needs a timm VisionTransformer encoder"),
    ],
)
def test_cli_refuses_unusable_encoders_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pretrain", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_cli_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(["pretrain", "--constraint", "none"])
    assert resolve_max_rate(args.constraint, args.max_rate) is None
    args = parser.parse_args(["pretrain", "--constraint", "none", "--max-rate", "0.3"])
    assert resolve_max_rate(args.constraint, args.max_rate) == 0.3
    assert resolve_max_rate("skew", parser.parse_args(["pretrain"]).max_rate) == 0.25
