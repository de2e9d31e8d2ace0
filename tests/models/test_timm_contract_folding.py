"""Folding through timm: ``timm.utils.model.reparameterize_model(model)`` gives the same modules, weights, memory
layouts and logits as ``model.reparameterize()`` for every family, fused kernels included (it used to reach only
vHeat's stage folding and leave the linear layers on the default kernels)."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from timm.utils.model import reparameterize_model
from torch import nn

import pdevision  # noqa: F401  (registers the models)
from pdevision.layers import InferenceLinear

CASES = [
    ("vheat_micro", {}),
    ("waveformer_micro", {}),
    ("hcnet_micro", {}),
    ("hcnet_micro", {"layout": "library"}),
    ("hcnet_micro", {"layout": "paper"}),
    ("pderesnet_micro", {}),
]


def summary(model: nn.Module) -> list[tuple[str, str, str]]:
    """Each module's name, type and fused activation."""
    return [
        (n, type(m).__name__, getattr(m, "act", "") if isinstance(m, InferenceLinear) else "")
        for n, m in model.named_modules()
    ]


@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_timm_and_own_folding_give_the_same_model(name: str, kwargs: dict[str, object]) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5, **kwargs).eval()
    via_timm = reparameterize_model(model)
    own = copy.deepcopy(model)
    own.reparameterize()
    assert summary(via_timm) == summary(own)
    assert not any(type(m) is nn.Linear for m in via_timm.modules()), "a linear layer left on the default kernels"
    if model.output_fmt == "NHWC":  # NHWC families: MLPs with their GELU fused, stem weights channels-last
        assert any(isinstance(m, InferenceLinear) and m.act == "gelu" for m in via_timm.modules())
        conv = next(m for m in via_timm.stem.modules() if isinstance(m, nn.Conv2d))
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    a, b = via_timm.state_dict(), own.state_dict()
    assert a.keys() == b.keys() and set(a) == set(model.state_dict()) | {k for k in a if k.endswith("k_exp")}
    assert all(torch.equal(a[k], b[k]) for k in a)
    for ma, mb in zip(via_timm.modules(), own.modules(), strict=True):
        for pa, pb in zip(ma.parameters(recurse=False), mb.parameters(recurse=False), strict=True):
            assert pa.stride() == pb.stride()
    x = torch.randn(2, 3, 64, 48)
    with torch.inference_mode():
        want, got_timm, got_own = model(x), via_timm(x), own(x)
    assert torch.equal(got_timm, got_own)
    torch.testing.assert_close(got_timm, want, rtol=0, atol=1e-4)


def test_own_folding_keeps_its_image_size_and_refuses_a_bad_one() -> None:
    model = timm.create_model("vheat_micro", num_classes=5).eval()
    with pytest.raises(ValueError, match="pair of ints"):
        model.reparameterize(img_size="96")
    assert all(type(m) is not InferenceLinear for m in model.modules())  # nothing folded before the error
    model.reparameterize(img_size=(96, 80))
    assert [s.folded_size() for s in model.stages] == [(24, 20), (12, 10), (6, 5), (3, 3)]
    via_timm = reparameterize_model(timm.create_model("vheat_micro", num_classes=5).eval())
    assert [s.folded_size() for s in via_timm.stages] == [(16, 16), (8, 8), (4, 4), (2, 2)]  # the training size
    assert summary(model) == summary(via_timm)
