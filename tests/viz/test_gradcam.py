"""Grad-CAM through the grad-cam package on channels-last stages: the map equals the NCHW computation, and
pytorch-grad-cam used directly with :func:`pdevision.viz.reshape_transform` equals an independent numpy
computation for every family."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn

from pdevision.viz import gradcam_maps, reshape_transform, reshape_transform_for
from pdevision.viz.common import create_named_model


def test_nchw_models_get_no_reshape() -> None:
    model = create_named_model("pderesnet_micro", 32, num_classes=5)
    assert model.output_fmt == "NCHW" and reshape_transform_for(model) is None
    assert reshape_transform_for(nn.Conv2d(1, 1, 1)) is None


def _numpy_gradcam(model: nn.Module, layer: nn.Module, x: torch.Tensor, classes: list[int], chans: int) -> np.ndarray:
    """Grad-CAM from hooks, in numpy: the layer's activations A and the gradients of the target logits, the channel
    axis found by its size ``chans`` (not from the model's declared layout), weights = spatially averaged gradients,
    ReLU of the weighted sum of A; then the package's display step (min-max scaled, bilinear to the input size,
    scaled again)."""
    saved: dict[str, torch.Tensor] = {}

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        saved["a"] = output
        output.register_hook(lambda g: saved.__setitem__("g", g))

    handle = layer.register_forward_hook(hook)
    try:
        logits = model(x)
    finally:
        handle.remove()
    logits[torch.arange(len(classes)), torch.tensor(classes)].sum().backward()
    a, g = saved["a"].detach().double().numpy(), saved["g"].double().numpy()
    (axis,) = [d for d in (1, 3) if a.shape[d] == chans]
    a, g = np.moveaxis(a, axis, 1), np.moveaxis(g, axis, 1)
    weights = g.mean(axis=(2, 3))
    cams = np.maximum(np.einsum("bc,bchw->bhw", weights, a), 0)

    def minmax(m: np.ndarray) -> np.ndarray:
        m = m - m.min()
        return m / (1e-7 + m.max())

    # scaled, resized, and scaled again (the package's layer aggregation, one layer here)
    return np.stack([minmax(cv2.resize(np.float32(minmax(cam)), (x.shape[3], x.shape[2]))) for cam in cams])


@pytest.mark.parametrize("name", ["vheat_micro", "hcnet_micro", "pderesnet_micro"])
def test_pytorch_grad_cam_with_reshape_transform_equals_numpy_gradcam(name: str) -> None:
    torch.manual_seed(0)
    model = create_named_model(name, 32, num_classes=5, **({"zero_init_last": False} if "pderesnet" in name else {}))
    x = torch.randn(2, 3, 32, 48)  # non-square, H/W at every stage differ from the channel counts
    classes = [1, 3]
    rt = reshape_transform(model)
    assert (rt is None) == (model.output_fmt == "NCHW")
    for i in (0, len(model.stages) - 1):
        layer = model.stages[i]
        expected = _numpy_gradcam(model, layer, x, classes, model.dims[i])
        assert expected.std() > 0.05  # a map with structure, not a constant
        with GradCAM(model=model, target_layers=[layer], reshape_transform=rt) as cam:
            got = cam(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])
        np.testing.assert_allclose(got, expected, atol=1e-4)
        np.testing.assert_allclose(gradcam_maps(model, layer, x, classes), expected, atol=1e-4)  # viz gradcam's
        if rt is not None:  # without it: the right shape, the wrong map
            with GradCAM(model=model, target_layers=[layer]) as cam:
                naive = cam(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])
            assert naive.shape == expected.shape and np.abs(naive - expected).max() > 0.1


def test_reshape_transform_refuses_a_layer_that_is_not_a_stage_map() -> None:
    model = create_named_model("vheat_micro", 32, num_classes=5)
    with pytest.raises(ValueError, match=r"expects \(batch, height, width, channels\) stage outputs, got \(2, 5\)"):
        reshape_transform(model)(torch.zeros(2, 5))
