"""One feature layout: ``features_only`` maps are NCHW (as timm's CNN features) whichever ``feature_cls`` timm
offers is used, for every family, and so are ``forward_intermediates``'s by default."""

from __future__ import annotations

import pytest
import timm
import torch
from timm.models._features import FeatureHookNet
from timm.models._features_fx import FeatureGraphNet

import pdevision  # noqa: F401

MICROS = ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"]
SIZE = (32, 64)  # height != width and neither equals a channel count: a permuted map cannot pass as NCHW
INDICES = (0, 2, 3)


@pytest.mark.parametrize("name", MICROS)
def test_features_only_is_nchw_for_every_feature_cls(name: str) -> None:
    torch.manual_seed(0)
    ref = timm.create_model(name).eval()
    x = torch.randn(1, 3, *SIZE)
    shapes = [(1, ref.dims[i], SIZE[0] // (4 * 2**i), SIZE[1] // (4 * 2**i)) for i in INDICES]
    with torch.no_grad():
        expected = ref.forward_intermediates(x, indices=list(INDICES), intermediates_only=True)
    assert [tuple(e.shape) for e in expected] == shapes  # forward_intermediates: NCHW by default
    for feature_cls in (None, "getter", "hook", "fx", FeatureHookNet, FeatureGraphNet):
        kwargs = {} if feature_cls is None else dict(feature_cls=feature_cls)
        torch.manual_seed(0)  # the same weights as ref
        model = timm.create_model(name, features_only=True, out_indices=INDICES, **kwargs).eval()
        assert model.output_fmt.value == "NCHW", feature_cls
        assert model.feature_info.channels() == [ref.dims[i] for i in INDICES]
        with torch.no_grad():
            feats = model(x)
        assert [tuple(f.shape) for f in feats] == shapes, feature_cls
        for f, e in zip(feats, expected, strict=True):
            assert f.is_contiguous()
            torch.testing.assert_close(f, e, rtol=1e-5, atol=1e-5, msg=lambda m, c=feature_cls: f"{c}: {m}")


@pytest.mark.parametrize("feature_cls", ["list", "dict", "nope"])
def test_feature_cls_that_cannot_apply_is_named(feature_cls: str) -> None:
    with pytest.raises(ValueError, match=f"feature_cls must be 'getter'.*'hook' or 'fx'.*got '{feature_cls}'"):
        timm.create_model("pderesnet_micro", features_only=True, feature_cls=feature_cls)
