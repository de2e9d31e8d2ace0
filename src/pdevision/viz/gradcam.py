"""Class activation maps per stage with the ``grad-cam`` package (Selvaraju et al., Grad-CAM), as in HcNet's
per-stage figures.

pytorch-grad-cam expects NCHW activations. vHeat and HcNet stages run channels-last: their outputs are
``(B, H, W, C)``, and without a reshape the package silently averages over the wrong axes. The reshape is
chosen from ``model.output_fmt`` (:func:`reshape_transform_for`): NHWC outputs are permuted to NCHW.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdevision._optional import require
from pdevision.viz.common import pyplot, save_figure, stage_layers


def nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def reshape_transform_for(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The reshape that turns the model's stage outputs into NCHW: a permute when ``output_fmt`` is NHWC."""
    return nhwc_to_nchw if getattr(model, "output_fmt", "NCHW") == "NHWC" else None


def gradcam(
    model: nn.Module,
    layer: nn.Module,
    images: torch.Tensor,
    classes: Sequence[int],
    reshape_transform: Callable[[torch.Tensor], torch.Tensor] | str | None = "auto",
) -> np.ndarray:
    """Grad-CAM maps ``(B, H, W)`` in [0, 1] at the input size for ``classes`` (one per image) at ``layer``;
    ``reshape_transform="auto"`` takes :func:`reshape_transform_for` of the model."""
    GradCAM = require("pytorch_grad_cam", "viz").GradCAM
    ClassifierOutputTarget = require("pytorch_grad_cam.utils.model_targets", "viz").ClassifierOutputTarget

    model.eval()
    rt = reshape_transform_for(model) if reshape_transform == "auto" else reshape_transform
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
    plt = pyplot()
    stages = list(result["maps"])
    rows, cols = display.shape[0], 1 + len(stages)
    fig, axes = plt.subplots(rows, cols, figsize=(2.0 * cols, 2.2 * rows), squeeze=False)

    def name(i: int) -> str:
        return str(class_names[i]) if class_names is not None and i < len(class_names) else str(i)

    for r in range(rows):
        top = ", ".join(
            f"{name(c)} {p:.2f}" for c, p in zip(result["top_classes"][r], result["top_probs"][r], strict=True)
        )
        ax = axes[r][0]
        ax.imshow(display[r])
        head = f"{captions[r]}\n" if captions else ""
        ax.set_title(f"{head}pred: {top}", fontsize=6)
        for c, s in enumerate(stages, start=1):
            ax = axes[r][c]
            ax.imshow(display[r])
            ax.imshow(result["maps"][s][r], cmap="jet", alpha=0.5, vmin=0, vmax=1)
            if r == 0:
                ax.set_title(f"{s}\n(class {name(result['targets'][r])})", fontsize=7)
            else:
                ax.set_title(f"class {name(result['targets'][r])}", fontsize=6)
        for ax in axes[r]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("Grad-CAM per stage (grad-cam package) for the predicted class", fontsize=9)
    return save_figure(fig, path)
