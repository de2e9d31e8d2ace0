"""Grad-CAM through the grad-cam package on channels-last stages: the map equals the NCHW computation."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from pdevision.viz import gradcam_maps, reshape_transform_for, stage_layers
from pdevision.viz.common import build_named_model, model_transform, photo_images


class _NCHWOut(nn.Module):
    """A stage whose output is permuted to NCHW (the layer Grad-CAM reads)."""

    def __init__(self, stage: nn.Module) -> None:
        super().__init__()
        self.stage = stage

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(x).permute(0, 3, 1, 2)


class _ToNHWC(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1)


def _manual_gradcam(model: nn.Module, layer: nn.Module, x: torch.Tensor, classes: list[int]) -> np.ndarray:
    """Grad-CAM's formula at the layer's resolution on NCHW activations: ReLU(sum_c mean_hw(dy/dA_c) A_c)."""
    acts: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda m, i, o: acts.append(o))
    try:
        logits = model(x)
    finally:
        handle.remove()
    score = logits[torch.arange(len(classes)), torch.tensor(classes)].sum()
    (grad,) = torch.autograd.grad(score, acts[0])
    act, grad = acts[0].permute(0, 3, 1, 2), grad.permute(0, 3, 1, 2)  # NHWC stage output to NCHW
    cam = torch.relu((grad.mean(dim=(2, 3), keepdim=True) * act).sum(1))
    return cam.detach().double().numpy()


@pytest.mark.parametrize("name", ["vheat_micro", "hcnet_micro"])
def test_nhwc_gradcam_equals_the_permuted_nchw_computation(name: str) -> None:
    torch.manual_seed(0)
    model = build_named_model(name, 32, num_classes=5)
    assert model.output_fmt == "NHWC" and reshape_transform_for(model) is not None
    x = photo_images(model_transform(model, 32), 2)[0]
    classes = [1, 3]
    naive_differs = []
    layers = stage_layers(model)
    for i in (0, len(layers) - 1):  # the first and the last stage
        layer = layers[i][1]
        ours = gradcam_maps(model, layer, x, classes)
        wrapped = copy.deepcopy(model)
        wrapped.stages[i] = nn.Sequential(_NCHWOut(wrapped.stages[i]), _ToNHWC())
        nchw = gradcam_maps(wrapped, wrapped.stages[i][0], x, classes, reshape_transform=None)
        assert ours.shape == (2, 32, 32)
        np.testing.assert_allclose(ours, nchw, atol=1e-6)
        naive = gradcam_maps(model, layer, x, classes, reshape_transform=None)
        naive_differs.append(float(np.abs(naive - ours).max()))
    # without the permute the package averages over the wrong axes, silently
    assert max(naive_differs) > 0.1
    # and the package's map is the formula on NCHW activations (min-max scaled, resized)
    layer = stage_layers(model)[-1][1]
    raw = _manual_gradcam(model, layer, x, classes)
    ours = gradcam_maps(model, layer, x, classes)
    for b in range(2):
        small = raw[b] - raw[b].min()
        small = small / (small.max() + 1e-7)
        h, w = small.shape
        # sample the package's resized map at the centres of the low-resolution cells
        ys = ((np.arange(h) + 0.5) * 32 / h - 0.5).round().astype(int)
        xs = ((np.arange(w) + 0.5) * 32 / w - 0.5).round().astype(int)
        assert np.argmax(ours[b][np.ix_(ys, xs)]) == np.argmax(small)


def test_nchw_models_get_no_reshape() -> None:
    model = build_named_model("pderesnet_micro", 32, num_classes=5)
    assert model.output_fmt == "NCHW" and reshape_transform_for(model) is None
    assert reshape_transform_for(nn.Conv2d(1, 1, 1)) is None
