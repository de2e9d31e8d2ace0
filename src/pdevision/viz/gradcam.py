"""Class activation maps per stage with the ``grad-cam`` package (Selvaraju et al., Grad-CAM), as in HcNet's
per-stage figures.

pytorch-grad-cam expects NCHW activations. vHeat and HcNet stages run channels-last: their outputs are
``(B, H, W, C)``, and without a reshape the package silently averages over the wrong axes (a map of the right
shape, wrong values). :func:`reshape_transform` gives the ``reshape_transform`` argument to pass to the package's
CAM classes for a model's stages (NHWC -> NCHW permute for vHeat / HcNet, ``None`` for NCHW models);
``pdevision viz gradcam`` uses the same function.

    from pytorch_grad_cam import GradCAM
    from pdevision.viz import reshape_transform

    cam = GradCAM(model, target_layers=[model.stages[-1]], reshape_transform=reshape_transform(model))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdevision._optional import require
from pdevision.viz.common import MIN_FONT, colorbar, save_figure, stage_layers, subplots


def nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    """``(B, H, W, C)`` activations or gradients to ``(B, C, H, W)``; anything but a 4-D tensor is a
    ``ValueError`` (the target layer is not a stage-like layer of an NHWC model)."""
    if not isinstance(t, torch.Tensor) or t.ndim != 4:
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(
            f"this reshape_transform expects (batch, height, width, channels) stage outputs, got {shape}; "
            "pick a target layer whose output is a stage map, e.g. model.stages[-1]"
        )
    return t.permute(0, 3, 1, 2)


def reshape_transform(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The ``reshape_transform`` to give pytorch-grad-cam's CAM classes for target layers in ``model.stages``
    (or their blocks): :func:`nhwc_to_nchw` when the stages run channels-last (``model.output_fmt == "NHWC"``:
    vHeat, HcNet), ``None`` (no reshape needed) for NCHW models (PDE-ResNet, timm's CNNs)."""
    return nhwc_to_nchw if getattr(model, "output_fmt", "NCHW") == "NHWC" else None


#: the former name of :func:`reshape_transform`
reshape_transform_for = reshape_transform


def gradcam(
    model: nn.Module,
    layer: nn.Module,
    images: torch.Tensor,
    classes: Sequence[int],
    reshape_transform: Callable[[torch.Tensor], torch.Tensor] | str | None = "auto",
) -> np.ndarray:
    """Grad-CAM maps ``(B, H, W)`` in [0, 1] at the input size for ``classes`` (one per image) at ``layer``;
    ``reshape_transform="auto"`` takes :func:`reshape_transform` of the model."""
    GradCAM = require("pytorch_grad_cam", "viz").GradCAM
    ClassifierOutputTarget = require("pytorch_grad_cam.utils.model_targets", "viz").ClassifierOutputTarget

    model.eval()
    rt = (
        reshape_transform_for(model) if reshape_transform == "auto" else reshape_transform
    )  # (the argument hides the function)
    with GradCAM(model=model, target_layers=[layer], reshape_transform=rt) as cam:
        maps = cam(input_tensor=images, targets=[ClassifierOutputTarget(int(c)) for c in classes])
    return np.asarray(maps, dtype=np.float64)


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, topk: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``topk`` probabilities and class indices."""
    probs = model(images).float().softmax(-1)
    top = probs.topk(min(topk, probs.shape[-1]), dim=-1)
    return top.values, top.indices


def stage_cams(model: nn.Module, images: torch.Tensor, classes: Sequence[int] | None = None) -> dict[str, Any]:
    """Grad-CAM of every stage for the predicted (or given) class of each image."""
    probs, idx = predict(model, images)
    targets = [int(i) for i in idx[:, 0]] if classes is None else [int(c) for c in classes]
    layers = stage_layers(model)
    maps = {name: gradcam(model, layer, images, targets) for name, layer in layers}
    return {"targets": targets, "top_probs": probs.tolist(), "top_classes": idx.tolist(), "maps": maps}


def plot_cams(
    display: np.ndarray,
    result: dict[str, Any],
    class_names: Sequence[str] | None,
    path: Path,
    captions: Sequence[str] | None = None,
) -> Path:
    """One row per image: the image with its top-3 predictions, then the CAM of each stage over it."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    stages = list(result["maps"])
    rows, cols = display.shape[0], 1 + len(stages)
    fig, axes = subplots(rows, cols, figsize=(2.3 * cols + 0.8, 2.6 * rows))

    def name(i: int) -> str:
        label = str(class_names[i]) if class_names is not None and i < len(class_names) else str(i)
        return label if len(label) <= 16 else label[:15] + "\N{HORIZONTAL ELLIPSIS}"

    for r in range(rows):
        top = "\n".join(
            f"{name(c)} {p:.2f}" for c, p in zip(result["top_classes"][r], result["top_probs"][r], strict=True)
        )
        ax = axes[r][0]
        ax.imshow(display[r])
        head = f"{captions[r]}\n" if captions else ""
        ax.set_ylabel(f"{head}pred: {top}", fontsize=MIN_FONT, rotation=0, ha="right", va="center")
        for c, s in enumerate(stages, start=1):
            ax = axes[r][c]
            ax.imshow(display[r])
            ax.imshow(result["maps"][s][r], cmap="jet", alpha=0.5, vmin=0, vmax=1)
            ax.set_title(
                f"{s}\nclass {name(result['targets'][r])}" if r == 0 else f"class {name(result['targets'][r])}",
                fontsize=MIN_FONT,
            )
        for ax in axes[r]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0][0].set_title("image", fontsize=MIN_FONT)
    cams = ScalarMappable(Normalize(0, 1), "jet")
    colorbar(fig, cams, axes[:, 1:].ravel().tolist(), "Grad-CAM (each map scaled to [0, 1])", shrink=0.8)
    fig.suptitle("Grad-CAM per stage (grad-cam package) for the predicted class", fontsize=10)
    return save_figure(fig, path)
