"""The physics inside the models: where heat goes and how fast.

- vHeat (:func:`vheat_heat`): the diffusivity ``k(w) = ReLU(Linear(FVE))`` of every block per frequency and
  channel (vHeat Eq. 8-10), its radial profile over ``|w| = sqrt(wx^2 + wy^2)``, the decay factors
  ``exp(-k(w) |w|^2)`` and a point source spread by each stage's first operator for times ``t`` (the operator
  itself is ``t = 1``: ``u(t) = IDCT2(DCT2(delta) exp(-k(w) |w|^2 t))``, the DCT solution with the learned
  ``k``; only the conduction, without the operator's linear maps and gate).
- HcNet (:func:`hcnet_heat`): the step size ``k`` actually used by every Heat Conduction Layer over real images
  (after the stable parametrisation's ``k / max(W, 1)``) and the learned stencil weights ``w1..w4``.
- PDE-ResNet (:func:`pderesnet_heat`): each block's response to a point perturbation of its input (a
  Jacobian-vector product with a unit impulse at the centre of every channel, on real images' features).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdevision.layers.hcl import HeatConductionLayer, NeighbourMeanHeat
from pdevision.ops.fdm import heat_stencil
from pdevision.ops.heat import frequency_energy, heat_conduct
from pdevision.viz.common import MIN_FONT, VizError, colorbar, family, index_ticks, save_figure, subplots
from pdevision.viz.erf import second_moments

TIMES = (0.25, 0.5, 1.0, 2.0, 4.0)

#: the families with heat figures (a WaveFormer has no heat diffusivity: its operator is the wave factor)
HEAT_FAMILIES = ("vheat", "hcnet", "pderesnet")


# -- vHeat ----------------------------------------------------------------------------------------


@torch.no_grad()
def vheat_diffusivity(stage: nn.Module, size: tuple[int, int] | None = None) -> list[np.ndarray]:
    """``k`` of every block of a vHeat stage at ``size`` (default: its training feature size), ``(H, W, C)``.
    A block loaded folded without FVE gets ``k = -log(decay) / |w|^2`` (undefined at ``w = 0``: NaN)."""
    size = tuple(size or stage.feat_size)
    out = []
    for block in stage.blocks:
        mixer = block.mixer
        if getattr(stage, "folded_only", False) and mixer.k_exp is not None:
            energy = frequency_energy(*mixer.k_exp.shape[:2], dtype=torch.float64)[..., None]
            k = -torch.log(mixer.k_exp.double().clamp_min(1e-300)) / energy
            k[0, 0] = float("nan")
        else:
            k = mixer.diffusivity(stage.fve(size))
        out.append(k.double().cpu().numpy())
    return out


def radial_profile(k: np.ndarray, bins: int = 12) -> dict[str, list[float]]:
    """Channel quantiles (10/50/90%) of ``k (H, W, C)`` in bins of the radial frequency ``|w|``."""
    h, w = k.shape[:2]
    wy = np.arange(h) * math.pi / h
    wx = np.arange(w) * math.pi / w
    radius = np.sqrt(wy[:, None] ** 2 + wx[None, :] ** 2)
    edges = np.linspace(0, radius.max() + 1e-9, bins + 1)
    centres, q10, q50, q90 = [], [], [], []
    for lo, hi in itertools.pairwise(edges):
        sel = (radius >= lo) & (radius < hi)
        if not sel.any():
            continue
        values = k[sel].ravel()
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        centres.append(float((lo + hi) / 2))
        q10.append(float(np.quantile(values, 0.1)))
        q50.append(float(np.quantile(values, 0.5)))
        q90.append(float(np.quantile(values, 0.9)))
    return {"radius": centres, "q10": q10, "median": q50, "q90": q90}


@torch.no_grad()
def point_source(stage: nn.Module, times: Sequence[float] = TIMES, side: int = 31) -> list[np.ndarray]:
    """A unit point source at the centre of a ``side x side`` map spread by the stage's first operator's
    learned ``k`` (FVE resampled to that size) for each time, averaged over channels: ``(side, side)`` each."""
    k = vheat_diffusivity(stage, (side, side))[0]
    k = torch.from_numpy(np.nan_to_num(k)).permute(2, 0, 1)  # (C, H, W)
    delta = torch.zeros_like(k)
    delta[:, side // 2, side // 2] = 1.0
    return [heat_conduct(delta, k, t).mean(0).numpy() for t in times]


def spread(u: np.ndarray) -> float:
    """RMS distance (pixels) of a heat map from its centre of mass, ``sqrt(var_y + var_x)``."""

    vy, vx = second_moments(u)
    return math.sqrt(vy + vx)


def vheat_heat(model: nn.Module, out: Path, times: Sequence[float] = TIMES, gif: bool = False) -> dict[str, Any]:
    """Figures ``vheat_diffusivity.png``, ``vheat_radial.png``, ``vheat_decay.png``, ``vheat_point_source.png``
    (and ``vheat_point_source.gif``) in ``out``; returns the numbers behind them."""
    stages = list(model.stages)
    ks = [vheat_diffusivity(s) for s in stages]
    depth = max(len(k) for k in ks)
    fig_k, ax_k = subplots(depth, len(stages), figsize=(2.8 * len(stages), 2.4 * depth))
    fig_d, ax_d = subplots(1, len(stages), figsize=(2.6 * len(stages) + 1.0, 2.8))
    fig_r, ax_r = subplots(1, len(stages), figsize=(3.2 * len(stages), 3.0))
    numbers: dict[str, Any] = {"family": "vheat", "stages": []}
    for i, kblocks in enumerate(ks):
        h, w = kblocks[0].shape[:2]
        energy = frequency_energy(h, w, dtype=torch.float64).numpy()[..., None]
        profiles = [radial_profile(k) for k in kblocks]
        _plot_diffusivity(fig_k, [ax_k[j][i] for j in range(depth)], kblocks, i)
        _plot_radial(ax_r[0][i], profiles, i)
        im = _plot_decay(ax_d[0][i], np.exp(-energy * kblocks[0]), i)
        blocks = [_block_numbers(k, energy, prof) for k, prof in zip(kblocks, profiles, strict=True)]
        numbers["stages"].append({"stage": i, "feat_size": [h, w], "blocks": blocks})
    colorbar(fig_d, im, ax_d.ravel().tolist(), "decay factor exp(-k|w|^2)", shrink=0.8)
    fig_k.suptitle("vHeat diffusivity k(w) per block (DC at the top left)", fontsize=10)
    save_figure(fig_k, out / "vheat_diffusivity.png")
    save_figure(fig_d, out / "vheat_decay.png")
    save_figure(fig_r, out / "vheat_radial.png")
    frames = [point_source(s, times) for s in stages]
    _point_source_figure(frames, times, out / "vheat_point_source.png")
    for entry, row in zip(numbers["stages"], frames, strict=True):
        entry["point_source_spread_px"] = {str(t): spread(u) for t, u in zip(times, row, strict=True)}
    numbers["times"] = list(times)
    if gif:
        _gif(frames, out / "vheat_point_source.gif")
    return numbers


def _block_numbers(k: np.ndarray, energy: np.ndarray, profile: dict[str, list[float]]) -> dict[str, Any]:
    """The numbers of one block's diffusivity ``k (H, W, C)``: mean, quantiles, zero fraction, mean decay factor."""
    decay = np.exp(-energy * k)
    return {
        "k_mean": float(np.nanmean(k)),
        "k_quantiles_10_50_90": [float(np.nanquantile(k, q)) for q in (0.1, 0.5, 0.9)],
        "k_zero_fraction": float(np.mean(k[np.isfinite(k)] == 0)),
        "decay_mean": float(np.nanmean(decay)),
        "radial_profile": profile,
    }


def _plot_diffusivity(fig: Any, axes: list[Any], kblocks: list[np.ndarray], stage: int) -> None:
    """One stage's column of the diffusivity figure: the channel-mean ``k`` of each block (empty below its depth)."""
    for j, ax in enumerate(axes):
        ax.set_xticks([])
        ax.set_yticks([])
        if j >= len(kblocks):
            ax.axis("off")
            continue
        im = ax.imshow(np.nanmean(kblocks[j], -1), cmap="viridis")
        colorbar(fig, im, ax, "k", ticks=3, shrink=0.8)
        ax.set_title(f"stage {stage} block {j}\nmean k over channels", fontsize=MIN_FONT)


def _plot_radial(ax: Any, profiles: list[dict[str, list[float]]], stage: int) -> None:
    """One stage's panel of the radial profiles ``k(|w|)``: each block's channel median and 10-90% band."""
    from matplotlib.ticker import MaxNLocator

    for j, prof in enumerate(profiles):
        ax.plot(prof["radius"], prof["median"], marker="o", markersize=3, label=f"block {j}")
        ax.fill_between(prof["radius"], prof["q10"], prof["q90"], alpha=0.2)
    ax.set_xlabel("|w| (rad / pixel)", fontsize=MIN_FONT)
    ax.set_ylabel("k" if stage == 0 else "", fontsize=MIN_FONT)
    ax.set_title(f"stage {stage}: k(|w|)\nchannel median, 10-90% band", fontsize=MIN_FONT)
    right = max(ax.get_xlim()[1], 0.5)  # a 1x1 map has one frequency: keep a readable axis
    ax.set_xlim(-0.03 * right, right)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.tick_params(labelsize=MIN_FONT)
    ax.legend(fontsize=MIN_FONT)


def _plot_decay(ax: Any, decay: np.ndarray, stage: int) -> Any:
    """One stage's panel of the decay factors ``exp(-k|w|^2)`` of its first block (channel mean); returns the
    image, for the shared colour bar."""
    im = ax.imshow(np.nanmean(decay, -1), cmap="magma", vmin=0, vmax=1)
    ax.set_title(f"stage {stage} block 0\nexp(-k|w|^2), channel mean", fontsize=MIN_FONT)
    ax.set_xlabel("wx index", fontsize=MIN_FONT)
    ax.set_ylabel("wy index", fontsize=MIN_FONT)
    index_ticks(ax, decay.shape)
    ax.tick_params(labelsize=MIN_FONT)
    return im


def _point_source_figure(frames: list[list[np.ndarray]], times: Sequence[float], path: Path) -> None:
    """The point source through each stage's first operator (rows) at each time (columns), log scale."""
    fig, axes = subplots(len(frames), len(times), figsize=(2.0 * len(times) + 1.0, 2.1 * len(frames)))
    for i, row in enumerate(frames):
        for c, (t, u) in enumerate(zip(times, row, strict=True)):
            ax = axes[i][c]
            rel = np.log10(np.maximum(u / max(float(u.max()), 1e-300), 1e-3))
            im = ax.imshow(rel, cmap="hot", vmin=-3, vmax=0)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"stage {i}, t={t:g}\nrms {spread(u):.2f} px", fontsize=MIN_FONT)
    colorbar(fig, im, axes.ravel().tolist(), "log10 u / max", shrink=0.6)
    fig.suptitle("a point source through each stage's first heat operator (t=1: the operator itself)", fontsize=10)
    save_figure(fig, path)


def _gif(frames: list[list[np.ndarray]], path: Path) -> None:
    """Frames over time, stages side by side, each frame scaled to its own maximum."""
    from PIL import Image

    images = []
    for t in range(len(frames[0])):
        row = np.concatenate([f[t] / max(f[t].max(), 1e-12) for f in frames], axis=1)
        big = np.kron((255 * row).astype(np.uint8), np.ones((4, 4), dtype=np.uint8))
        images.append(Image.fromarray(big))
    images[0].save(path, save_all=True, append_images=images[1:], duration=400, loop=0)


# -- HcNet ----------------------------------------------------------------------------------------


def _authors_stencil(channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The authors' fixed stencil ``mean_8(z) - z`` (inside the image): weights ``(C, 8)`` of 1/8 and its 3x3 kernel."""
    kernel = torch.full((3, 3), 1 / 8, dtype=torch.float64)
    kernel[1, 1] = -1.0
    return torch.full((channels, 8), 1 / 8, dtype=torch.float64), kernel


@torch.no_grad()
def hcnet_coefficients(model: nn.Module, images: torch.Tensor) -> list[dict[str, Any]]:
    """For every heat step (the authors' :class:`~pdevision.layers.hcl.NeighbourMeanHeat` or the library's
    :class:`HeatConductionLayer`): its name, the step sizes ``k`` used on ``images`` (``(B, C)``, after
    stabilisation), the neighbour weights ``w`` (``(C, 4)`` learned, or the authors' fixed ``(C, 8)`` of 1/8) and
    the channel-mean 3x3 stencil."""

    kinds = (HeatConductionLayer, NeighbourMeanHeat)
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, kinds)]
    seen: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def hook(name: str):
        def fn(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0]
            if isinstance(module, NeighbourMeanHeat):
                k = module.rate(x)
                w, kernel = _authors_stencil(x.shape[1])
            else:
                w, k = module.coefficients(x)
                kernel = heat_stencil(w.detach().double().cpu()).mean(0)[0]
            k = torch.as_tensor(k).expand(x.shape[0], x.shape[1], 1, 1) if k.ndim < 4 else k
            seen[name] = (w.detach().cpu(), k.detach().reshape(k.shape[0], -1).cpu(), kernel)

        return fn

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in layers]
    try:
        model.eval()(images)
    finally:
        for h in handles:
            h.remove()
    return [
        {"layer": n, "w": seen[n][0].double().numpy(), "k": seen[n][1].double().numpy(), "kernel": seen[n][2].numpy()}
        for n, _ in layers
    ]


def hcnet_heat(model: nn.Module, images: torch.Tensor, out: Path) -> dict[str, Any]:
    """Figures ``hcnet_k.png`` (distribution of ``k`` per layer over the images) and ``hcnet_stencils.png``
    (channel-mean stencil of ``N(z) - W z`` per layer); returns the numbers."""

    coeffs = hcnet_coefficients(model, images)
    short = [
        c["layer"].replace("stages.", "s").replace(".blocks.", ".b").replace(".mixer.heat", "").replace(".heat", "")
        for c in coeffs
    ]
    fig, ax = subplots(1, 1, figsize=(max(4.0, 0.7 * len(coeffs) + 2), 3.4))
    ax = ax[0][0]
    ax.boxplot([c["k"].ravel() for c in coeffs], showfliers=False)
    ax.set_xticks(range(1, len(coeffs) + 1), short, rotation=90, fontsize=MIN_FONT)
    ax.set(xlabel="Heat Conduction Layer", ylabel="k per image and channel")
    ax.set_title(f"HcNet step size k over {images.shape[0]} images")
    save_figure(fig, out / "hcnet_k.png")
    kernels = [c["kernel"] for c in coeffs]
    lim = max(float(np.abs(k).max()) for k in kernels) or 1.0  # one colour scale for every panel
    fig, axes = subplots(1, len(coeffs), figsize=(2.0 * len(coeffs) + 1.0, 2.6))
    numbers: dict[str, Any] = {"family": "hcnet", "images": int(images.shape[0]), "layers": []}
    for ax, c, s, kernel in zip(axes[0], coeffs, short, kernels, strict=True):
        im = ax.imshow(kernel, cmap="coolwarm", vmin=-lim, vmax=lim)
        for (a, b), v in np.ndenumerate(kernel):
            ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize=MIN_FONT)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(s, fontsize=MIN_FONT)
        k = c["k"]
        numbers["layers"].append(
            {
                "layer": c["layer"],
                "k_mean": float(k.mean()),
                "k_quantiles_10_50_90": [float(np.quantile(k, q)) for q in (0.1, 0.5, 0.9)],
                "w_mean": c["w"].mean(0).tolist(),
                "w_min": float(c["w"].min()),
                "w_max": float(c["w"].max()),
                "kW_max": float((k * c["w"].sum(-1)[None, :]).max()),
            }
        )
    colorbar(fig, im, axes.ravel().tolist(), "stencil weight", shrink=0.8)
    fig.suptitle("stencil N(z) - W z, mean over channels (authors' layout: the fixed 8-neighbour mean)", fontsize=10)
    save_figure(fig, out / "hcnet_stencils.png")
    return numbers


# -- PDE-ResNet -----------------------------------------------------------------------------------


def pderesnet_point_response(model: nn.Module, images: torch.Tensor) -> list[dict[str, Any]]:
    """Per block: ``sum_c |J v|`` averaged over images, ``v`` a unit impulse at the centre of every channel
    of the block's input (its features of ``images``), with the Chebyshev radius holding 95% of it."""
    inputs: dict[str, torch.Tensor] = {}
    blocks = [(f"stages.{i}.blocks.{j}", b) for i, s in enumerate(model.stages) for j, b in enumerate(s.blocks)]

    def hook(name: str):
        def fn(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            inputs[name] = args[0].detach()

        return fn

    handles = [b.register_forward_pre_hook(hook(n)) for n, b in blocks]
    try:
        with torch.no_grad():
            model.eval()(images)
    finally:
        for h in handles:
            h.remove()
    out = []
    for name, block in blocks:
        x = inputs[name]
        v = torch.zeros_like(x)
        cy, cx = x.shape[-2] // 2, x.shape[-1] // 2
        v[:, :, cy, cx] = 1.0
        _, jv = torch.func.jvp(block, (x,), (v,))
        resp = jv.detach().abs().sum(1).mean(0).double().cpu().numpy()
        oy = cy // block.stride
        ox = cx // block.stride
        yy, xx = np.indices(resp.shape)
        dist = np.maximum(np.abs(yy - oy), np.abs(xx - ox))
        total = resp.sum()
        radius95 = None
        if total > 0:
            for r in range(int(dist.max()) + 1):
                if resp[dist <= r].sum() >= 0.95 * total:
                    radius95 = r
                    break
        nonzero = dist[resp > 0]
        support = int(nonzero.max()) if nonzero.size else None
        out.append(
            {
                "block": name,
                "map": resp,
                "centre": (oy, ox),
                "radius95": radius95,
                "support_radius": support,
                "stride": block.stride,
            }
        )
    return out


def pderesnet_heat(model: nn.Module, images: torch.Tensor, out: Path, window: int = 4) -> dict[str, Any]:
    """Figure ``pderesnet_point_response.png``: each block's response to a point perturbation, a
    ``(2 window + 1)`` crop around the centre; returns the numbers."""
    resp = pderesnet_point_response(model, images)
    cols = min(len(resp), 8)  # rows of 8 blocks: a ResNet-50 layout has 16
    rows = math.ceil(len(resp) / cols)
    fig, axes = subplots(rows, cols, figsize=(1.9 * cols + 1.0, 2.3 * rows))
    for ax in axes.ravel()[len(resp) :]:
        ax.axis("off")
    numbers: dict[str, Any] = {"family": "pderesnet", "images": int(images.shape[0]), "blocks": []}
    for ax, r in zip(axes.ravel(), resp, strict=False):
        m = r["map"]
        oy, ox = r["centre"]
        crop = m[max(oy - window, 0) : oy + window + 1, max(ox - window, 0) : ox + window + 1]
        im = ax.imshow(crop / max(crop.max(), 1e-300), cmap="hot", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
        title = f"{r['block'].replace('stages.', 's').replace('.blocks.', '.b')}\nr95={r['radius95']}"
        ax.set_title(title, fontsize=MIN_FONT)
        numbers["blocks"].append(
            {
                "block": r["block"],
                "stride": r["stride"],
                "radius95_px": r["radius95"],
                "support_radius_px": r["support_radius"],
                "map_size": list(m.shape),
            }
        )
    colorbar(fig, im, axes.ravel().tolist(), "response / max", shrink=0.8)
    fig.suptitle("PDE-ResNet: response of each block to a point perturbation of its input (crop)", fontsize=10)
    save_figure(fig, out / "pderesnet_point_response.png")
    return numbers


def heat_figures(
    model: nn.Module, images: torch.Tensor | None, out: Path, times: Sequence[float] = TIMES, gif: bool = False
) -> dict[str, Any]:
    """The figures of the model's family (vHeat, HcNet, PDE-ResNet) in ``out``, and their numbers."""
    kind = family(model)
    if kind not in HEAT_FAMILIES:
        raise VizError(
            f"viz heat shows vHeat, HcNet and PDE-ResNet models, got {type(model).__name__} "
            "(use viz erf or viz gradcam for other models)"
        )
    out.mkdir(parents=True, exist_ok=True)
    if kind == "vheat":
        return vheat_heat(model, out, times, gif)
    if images is None:
        raise VizError(f"the {kind} heat figures need images")
    if kind == "hcnet":
        return hcnet_heat(model, images, out)
    return pderesnet_heat(model, images, out)
