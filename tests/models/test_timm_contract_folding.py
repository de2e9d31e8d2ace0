"""Folding through timm: ``timm.utils.model.reparameterize_model(model)`` gives the same modules, weights, memory
layouts and logits as ``model.reparameterize()`` for every family; both are plain PyTorch (the CPU kernels are
``pdevision.fastpath.accelerate``'s, applied apart)."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from timm.utils.model import reparameterize_model
from torch import nn

import pdevision  # noqa: F401  (registers the models)
from pdevision.fastpath import is_accelerated
from tests.helpers import STAGED_CASES

CASES = STAGED_CASES


def summary(model: nn.Module) -> list[tuple[str, str, str]]:
    """Each module's name and type."""
    return [(n, type(m).__name__) for n, m in model.named_modules()]


@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_timm_and_own_folding_give_the_same_model(name: str, kwargs: dict[str, object]) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5, **kwargs).eval()
    via_timm = reparameterize_model(model)
    own = copy.deepcopy(model)
    own.reparameterize()
    assert summary(via_timm) == summary(own)
    assert summary(via_timm) == summary(timm.create_model(name, num_classes=5, **kwargs))  # folding swaps nothing
    assert not is_accelerated(via_timm)
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
    assert all(s.folded_size() is None for s in model.stages)  # nothing folded before the error
    model.reparameterize(img_size=(96, 80))
    assert [s.folded_size() for s in model.stages] == [(24, 20), (12, 10), (6, 5), (3, 3)]
    via_timm = reparameterize_model(timm.create_model("vheat_micro", num_classes=5).eval())
    assert [s.folded_size() for s in via_timm.stages] == [(16, 16), (8, 8), (4, 4), (2, 2)]  # the training size
    assert summary(model) == summary(via_timm)
