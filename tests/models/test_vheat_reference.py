"""Compatibility with the vHeat authors' code: parameter counts and logits from their checkpoints.

The fixtures were produced by running the authors' implementation (see tests/fixtures/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch

import pdevision  # noqa: F401
from tests.helpers import FIXTURES, relative_error


@pytest.mark.parametrize("name", ["vheat_tiny", "vheat_small", "vheat_base"])
def test_parameter_counts_equal_authors_code(name: str) -> None:
    ref = json.loads((FIXTURES / "vheat_ref_params.json").read_text())
    expected = ref["models"][name]["params"]
    model = timm.create_model(name)
    assert sum(p.numel() for p in model.parameters()) == expected


def _create_from(path: Path, **kwargs: object) -> torch.nn.Module:
    cfg = torch.load(FIXTURES / "vheat_ref_prenorm.pth", weights_only=True)["config"]
    post_norm = "postnorm" in path.name
    args = dict(
        img_size=cfg["img_size"],
        dims=cfg["dims"],
        depths=tuple(cfg["depths"]),
        post_norm=post_norm,
        layer_scale=1e-5 if post_norm else None,
        num_classes=cfg["num_classes"],
    )
    args.update(kwargs)
    return timm.create_model(
        "vheat_micro",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path), num_classes=cfg["num_classes"]),
        **args,
    ).eval()


@pytest.mark.parametrize("layout", ["", "_infer"])
@pytest.mark.parametrize("name", ["prenorm", "postnorm_ls"])
def test_logits_equal_authors_code(name: str, layout: str) -> None:
    path = FIXTURES / f"vheat_ref_{name}{layout}.pth"
    ref = torch.load(path, weights_only=True)
    model = _create_from(path)
    with torch.no_grad():
        assert relative_error(model(ref["input"]), ref["logits"]) < 1e-4
        assert relative_error(model.double()(ref["input"].double()), ref["logits_f64"]) < 1e-10


@pytest.mark.parametrize("wrapper", ["model", "model_ema", "state_dict", None])
def test_wrapped_and_raw_state_dicts_load(tmp_path: Path, wrapper: str | None) -> None:
    ref = torch.load(FIXTURES / "vheat_ref_prenorm.pth", weights_only=True)
    state = {f"module.{k}": v for k, v in ref["model"].items()} if wrapper == "state_dict" else ref["model"]
    path = tmp_path / "ckpt.pth"
    torch.save({wrapper: state, "epoch": 3} if wrapper else state, path)
    out = _create_from(path)(ref["input"])
    assert relative_error(out.detach(), ref["logits"]) < 1e-4


def test_folded_checkpoint_runs_only_at_its_size() -> None:
    path = FIXTURES / "vheat_ref_prenorm_infer.pth"
    model = _create_from(path)
    with pytest.raises(ValueError, match="folded"):
        model(torch.randn(1, 3, 96, 96))
    with pytest.raises(ValueError, match="training=True"):
        model.train()(torch.randn(1, 3, 64, 64))


def test_fve_of_other_resolution_is_resampled_on_load() -> None:
    path = FIXTURES / "vheat_ref_prenorm.pth"
    ref = torch.load(path, weights_only=True)
    model = _create_from(path, img_size=96)
    assert model.stages[0].freq_embed.shape[:2] == (24, 24)
    # At 64 px the resampled FVE (24 -> 16 frequencies) differs from the original, but stays close
    # because it follows the physical frequency; outputs remain finite and correlated.
    out = model(ref["input"]).detach()
    assert torch.isfinite(out).all()
    assert torch.corrcoef(torch.stack([out.flatten(), ref["logits"].flatten()]))[0, 1] > 0.9
