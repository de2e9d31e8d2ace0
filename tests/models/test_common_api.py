"""Behaviour every family shares through StagedBackbone: clear errors for bad input."""

from __future__ import annotations

import pytest
import timm
import torch

import pdevision  # noqa: F401

MICROS = ["vheat_micro", "hcnet_micro", "pderesnet_micro"]


@pytest.mark.parametrize("name", MICROS)
@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((2, 1, 64, 64), r"expected 3 input channels.*got 1 channels in shape \(2, 1, 64, 64\)"),
        ((2, 3, 31, 64), r"at least 32.*got 31x64"),
        ((3, 64, 64), r"4-D tensor of shape \(batch, 3, height, width\), got 3-D shape \(3, 64, 64\)"),
        ((1, 2, 3, 64, 64), r"got 5-D"),
    ],
)
def test_bad_input_is_clear(name: str, shape: tuple[int, ...], match: str) -> None:
    model = timm.create_model(name, num_classes=3).eval()
    with pytest.raises(ValueError, match=match):
        model(torch.randn(*shape))
    with pytest.raises(ValueError, match=match):
        model.forward_intermediates(torch.randn(*shape))
