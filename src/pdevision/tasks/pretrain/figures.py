"""A PNG grid of reconstructions: what the encoder saw, the prediction, the target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from pdevision._optional import require


def _to_rgb(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Normalised ``(B, 3, H, W)`` NCHW to ``(B, H, W, 3)`` in [0, 1]."""
    m = torch.tensor(mean, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    return (images * s + m).clamp(0, 1).permute(0, 2, 3, 1).cpu().float()


def save_reconstruction_grid(
    panels: Mapping[str, Mapping[str, torch.Tensor]],
    mean: Sequence[float],
    std: Sequence[float],
    path: str | Path,
) -> Path:
    """One row per image: for each method in ``panels`` (``{label: reconstruct(images)}``) its visible input and
    prediction, then the target (taken from the first method). Hidden pixels show as the mean colour; the
    prediction has the visible part pasted in and, with per-patch normalised targets, each predicted patch is
    shown with the true patch's mean and variance (as in MAE's figures)."""
    matplotlib = require("matplotlib", "train")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(panels)
    first = panels[labels[0]]
    target = _to_rgb(first["target"], mean, std)
    columns = [(f"{lab}: visible", _to_rgb(panels[lab]["visible"], mean, std)) for lab in labels]
    columns = [
        col
        for lab, vis in zip(labels, columns, strict=True)
        for col in (vis, (f"{lab}: prediction", _to_rgb(panels[lab]["prediction"], mean, std)))
    ]
    columns.append(("target", target))
    rows = target.shape[0]
    fig, axes = plt.subplots(
        rows, len(columns), figsize=(1.8 * len(columns), 1.8 * rows + 0.3), squeeze=False, layout="constrained"
    )
    for r in range(rows):
        for c, (title, imgs) in enumerate(columns):
            ax = axes[r][c]
            ax.imshow(imgs[r].numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(title.replace(": ", ":\n"), fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
