"""Effective receptive fields (ERF): how much each input pixel moves the centre output of a stage.

For a stage output ``y`` (NCHW) of size ``h x w`` the ERF map of one image is ``sum_c |d s / d x_c|`` with
``s = sum_k y[k, h // 2, w // 2]`` (the centre position, summed over channels) and ``x`` the input image;
maps are averaged over real images, as in the vHeat paper's ERF figures (which follow RepLKNet; the papers'
text does not state the reduction, so this is the plain channel sum, without RepLKNet's ReLU on ``y``).

One scalar per map: :func:`area_share`, the smallest share of the input area whose pixels (largest first)
hold a fraction ``q`` of the total gradient mass (``q = 0.5`` and ``0.95`` in the figures). A map
concentrated on ``n`` pixels has a share of at most ``n / (H W)``. For a heat kernel of time ``k t``
(variance ``2 k t`` per axis) the 50% share is about ``4 pi ln(2) k t / (H W)`` (the disc holding half of a
2-D Gaussian). :func:`second_moments` gives the variance per axis about the map's centre of mass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdevision.viz.common import MIN_FONT, colorbar, save_figure, stage_layers, subplots

log = logging.getLogger(__name__)

FRACTIONS = (0.5, 0.95)


def feature_maps(model: nn.Module | Callable[[torch.Tensor], Any], x: torch.Tensor) -> list[torch.Tensor]:
    """Stage outputs, NCHW: ``forward_intermediates`` (timm's convention) where the model has it, else the
    model's output (one map, or a list of maps)."""
    if hasattr(model, "forward_intermediates"):
        return list(model.forward_intermediates(x, intermediates_only=True))
    out = model(x)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def erf_maps(
    model: nn.Module | Callable[[torch.Tensor], Any], images: torch.Tensor, batch_size: int = 4
) -> list[np.ndarray]:
    """One ``(H, W)`` ERF map per stage (float64), the mean over ``images`` (NCHW) of ``sum_c |grad|``."""
    if isinstance(model, nn.Module):
        model.eval()
    totals: list[np.ndarray] | None = None
    for start in range(0, images.shape[0], batch_size):
        x = images[start : start + batch_size].detach().clone().requires_grad_(True)
        feats = feature_maps(model, x)
        if totals is None:
            totals = [np.zeros(images.shape[-2:], dtype=np.float64) for _ in feats]
        for i, f in enumerate(feats):
            h, w = f.shape[-2:]
            # images are independent in eval mode: the batch sum's gradient is each image's own
            score = f[:, :, h // 2, w // 2].sum()
            (grad,) = torch.autograd.grad(score, x, retain_graph=i < len(feats) - 1)
            totals[i] += grad.detach().abs().sum(dim=1).sum(dim=0).double().cpu().numpy()
    assert totals is not None
    return [t / images.shape[0] for t in totals]


def area_share(erf: np.ndarray, fraction: float) -> float:
    """Smallest share of the map's pixels (largest values first) that holds ``fraction`` of its total."""
    flat = np.sort(np.abs(erf).ravel())[::-1]
    total = flat.sum()
    if total <= 0:
        return float("nan")
    count = int(np.searchsorted(np.cumsum(flat) / total, fraction - 1e-12)) + 1
    return min(count, flat.size) / flat.size


def second_moments(erf: np.ndarray) -> tuple[float, float]:
    """Variance of the normalised map along rows (y) and columns (x), about its centre of mass."""
    p = np.abs(erf) / np.abs(erf).sum()
    ys, xs = np.arange(p.shape[0]), np.arange(p.shape[1])
    py, px = p.sum(1), p.sum(0)
    my, mx = (py * ys).sum(), (px * xs).sum()
    return float((py * (ys - my) ** 2).sum()), float((px * (xs - mx) ** 2).sum())


@dataclass
class ErfResult:
    """ERF maps of one model: stage names, maps and their scalars."""

    model: str
    stages: list[str]
    maps: list[np.ndarray]
    weights: str = "random"
    shares: list[dict[str, float]] = field(default_factory=list)
    moments: list[tuple[float, float]] = field(default_factory=list)

    def numbers(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "weights": self.weights,
            "input_size": list(self.maps[0].shape) if self.maps else None,
            "stages": [
                {"stage": s, **sh, "variance_yx": list(mo)}
                for s, sh, mo in zip(self.stages, self.shares, self.moments, strict=True)
            ],
        }


def compute_erf(model: nn.Module, images: torch.Tensor, name: str, weights: str = "random") -> ErfResult:
    """ERF maps of every stage of ``model`` on ``images`` with their area shares and second moments."""
    maps = erf_maps(model, images)
    layers = [n for n, _ in stage_layers(model)]
    stages = layers if len(layers) == len(maps) else [f"stage {i}" for i in range(len(maps))]
    shares = [{f"area_{round(q * 100)}": area_share(m, q) for q in FRACTIONS} for m in maps]
    moments = [second_moments(m) for m in maps]
    return ErfResult(name, stages, maps, weights, shares, moments)


def plot_erf(results: Sequence[ErfResult], path: Path, title: str = "") -> Path:
    """One row per model, one column per stage: ``log10`` of the ERF map relative to its maximum."""
    cols = max(len(r.maps) for r in results)
    fig, axes = subplots(len(results), cols, figsize=(2.3 * cols + 1.0, 2.5 * len(results)))
    for r, res in enumerate(results):
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(res.maps):
                ax.axis("off")
                continue
            m = res.maps[c]
            rel = np.log10(np.maximum(m / max(m.max(), 1e-300), 1e-4))
            im = ax.imshow(rel, cmap="inferno", vmin=-4, vmax=0)
            sh = res.shares[c]
            ax.set_title(
                f"{res.stages[c]}\n50%: {100 * sh['area_50']:.1f}%  95%: {100 * sh['area_95']:.1f}%", fontsize=MIN_FONT
            )
            if c == 0:
                ax.set_ylabel(f"{res.model}\n({res.weights})", fontsize=MIN_FONT)
    colorbar(fig, im, axes.ravel().tolist(), "log10 |grad| / max", shrink=0.6)
    fig.suptitle(title or "effective receptive field of each stage's centre output (share of input area)", fontsize=10)
    return save_figure(fig, path)
