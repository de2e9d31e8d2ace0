"""FX feature extraction (torchvision's create_feature_extractor, timm's feature_cls="fx") on every family."""

from __future__ import annotations

import pytest
import timm
import torch
from torchvision.models.feature_extraction import create_feature_extractor

import pdevision  # noqa: F401

MICROS = ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"]


def _nchw(model: torch.nn.Module, y: torch.Tensor) -> torch.Tensor:
    """FX returns a stage's output in the stage layout (NHWC for vHeat / HcNet)."""
    return y.permute(0, 3, 1, 2) if model.output_fmt == "NHWC" else y


@pytest.mark.parametrize("name", MICROS)
def test_torchvision_feature_extractor(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=3).eval()
    nodes = {"stages.1": "s1", "stages.2.blocks.0": "b20", "stages.3": "s3"}
    extractor = create_feature_extractor(model, return_nodes=nodes).eval()
    for size in ((64, 64), (40, 56)):  # a size other than the training one: the graph is not shape-specialised
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            feats = extractor(x)
            _, ref = model.forward_intermediates(x, indices=[1, 3])
        torch.testing.assert_close(_nchw(model, feats["s1"]), ref[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(_nchw(model, feats["s3"]), ref[1], rtol=1e-5, atol=1e-5)
        assert feats["b20"].shape[0] == 2
    with pytest.raises(ValueError, match="expected 3 input channels"):  # the input check still runs
        extractor(torch.randn(2, 1, 64, 64))


@pytest.mark.parametrize("name", MICROS)
def test_timm_features_only_fx(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, features_only=True, feature_cls="fx", out_indices=(0, 2)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        feats = model(x)
    chans = model.feature_info.channels()
    assert len(feats) == 2 and len(chans) == 2
    for f, c in zip(feats, chans, strict=True):
        assert c in (f.shape[1], f.shape[-1])
