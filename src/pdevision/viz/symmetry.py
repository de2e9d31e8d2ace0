"""PDE-ResNet's weight symmetry, shown: the 1x1 weights of a folded model, the same after a random element of
the acting group (:func:`pdevision.symmetry.transform`) and after :func:`pdevision.symmetry.sparsify`, their
histograms, and the relative logits difference against the folded model (the paper's claim: the weights move,
the function stays)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdevision.symmetry import (
    check_invariance,
    fold_batchnorm,
    one_by_one_weights,
    random_element,
    sparsify,
    stage_groups,
    transform,
)
from pdevision.viz.common import MIN_FONT, VizError, colorbar, family, index_ticks, save_figure, subplots


def _pick(weights: list[tuple[str, torch.Tensor]]) -> str:
    """The 1x1 matrix the figure shows: the first ``mix`` weight that reads a stage stream of a later stage."""
    names = [n for n, _ in weights]
    mixes = [n for n in names if n.endswith("mix.weight") and not n.startswith("stages.0.")]
    return (mixes or names)[0]


def symmetry_figures(
    model: nn.Module, images: torch.Tensor, out: Path, seed: int = 0, steps: int = 100, threshold: float = 0.1
) -> dict[str, Any]:
    """``symmetry_weights.png`` and ``symmetry_histograms.png`` in ``out``; returns the numbers (logits
    differences, groups, sparsity). ``model`` must be a PDE-ResNet."""
    if family(model) != "pderesnet":
        raise VizError(f"viz symmetry needs a PDE-ResNet (its weight symmetry), got a {type(model).__name__}")
    model = model.eval()
    folded = fold_batchnorm(model)
    groups = stage_groups(folded)
    elements = random_element(folded, seed=seed)
    moved = transform(folded, elements)
    result = sparsify(model, steps=steps, threshold=threshold, inputs=images)
    states = {"folded": folded, "group element": moved, "sparsify": result.model}
    errors = {
        "group element": check_invariance(folded, moved, images),
        "sparsify": check_invariance(folded, result.model, images),
    }
    weights = {k: one_by_one_weights(m) for k, m in states.items()}
    shown = _pick(weights["folded"])
    ref = dict(weights["folded"])[shown].detach().double()
    moved_by = {
        label: float((dict(ws)[shown].detach().double() - ref).norm() / ref.norm().clamp_min(1e-300))
        for label, ws in weights.items()
        if label != "folded"
    }
    fig, axes = subplots(1, 3, figsize=(12, 4.0))
    for c, (ax, (label, ws)) in enumerate(zip(axes[0], weights.items(), strict=True)):
        w = dict(ws)[shown][:, :, 0, 0].detach().double().numpy()
        lim = float(np.abs(w).max())
        im = ax.imshow(w, cmap="coolwarm", vmin=-lim, vmax=lim, aspect="auto")
        colorbar(fig, im, ax, "weight", shrink=0.8)
        diff = errors.get(label)
        ax.set_title(f"{label}" + (f"\nlogits diff {diff:.1e}" if diff is not None else "\n(reference)"), fontsize=8)
        ax.set(xlabel="input channel", ylabel="output channel" if c == 0 else "")
        index_ticks(ax, w.shape)
    fig.suptitle(f"{shown} (1x1): groups per stage {', '.join(groups)}", fontsize=10)
    save_figure(fig, out / "symmetry_weights.png")

    fig, ax = subplots(1, 1, figsize=(6, 3.6))
    ax = ax[0][0]
    hist: dict[str, Any] = {}
    for label, ws in weights.items():
        rel = np.concatenate(
            [(w.detach().double() / w.detach().double().square().mean().sqrt()).abs().ravel().numpy() for _, w in ws]
        )
        counts, edges = np.histogram(np.log10(np.maximum(rel, 1e-6)), bins=60, range=(-6, 1.5))
        ax.stairs(counts, edges, label=label)
        hist[label] = {"fraction_below_threshold": float((rel < threshold).mean()), "counts": counts.tolist()}
    ax.axvline(np.log10(threshold), color="k", ls="--", lw=0.8)
    ax.set(xlabel="log10 |w| / RMS of its matrix", ylabel="count", title="all 1x1 weights")
    ax.legend(fontsize=MIN_FONT)
    save_figure(fig, out / "symmetry_histograms.png")
    return {
        "groups": groups,
        "shown_matrix": shown,
        "shown_matrix_rel_change": moved_by,
        "images": int(images.shape[0]),
        "logits_rel_diff": errors,
        "threshold": threshold,
        "sparsity_before": result.sparsity_before,
        "sparsity_after": result.sparsity_after,
        "pruned_error_before": result.pruned_error_before,
        "pruned_error_after": result.pruned_error_after,
        "sparsify_steps": steps,
        "histograms": hist,
        "histogram_edges": np.linspace(-6, 1.5, 61).tolist(),
    }
