"""Explicit finite-difference steps of the anisotropic heat equation (HcNet's Heat Conduction Layer).

One explicit Euler step of ``u_t = div(D grad u)`` on the pixel grid, with the 4-neighbour stencil

    z'[i,j] = z[i,j] + k * (N(z)[i,j] - W z[i,j])           (HcNet, Zhang & Gong: the Heat Conduction Layer)
    N(z)[i,j] = w1 z[i+1,j] + w2 z[i-1,j] + w3 z[i,j+1] + w4 z[i,j-1],   W = w1 + w2 + w3 + w4

``i`` indexes rows (height), ``j`` columns (width). The step is one depthwise 3x3 convolution with the
kernel of :func:`heat_stencil`, scaled by ``k`` (per sample and channel) and added to ``z``.

Boundaries: ``"insulated"`` (Neumann ``du/dn = 0``, ghost cells replicate the edge) or ``"zeros"``
(Dirichlet ``u = 0`` outside the image, heat leaks out).

What holds, exactly (the tests check each):

- Insulated boundary, total heat per sample and channel: ``sum(z') - sum(z) = k * ((w1 - w2) *
  (sum(last row) - sum(first row)) + (w3 - w4) * (sum(last column) - sum(first column)))``. So the sum is
  conserved for every input iff the stencil is symmetric per axis, ``w1 == w2`` and ``w3 == w4`` (anisotropic
  between the axes is fine). With ``w1 != w2`` the stencil is diffusion plus a central-difference advection
  term ``(w1 - w2) / 2 * (z[i+1] - z[i-1])``, which edge replication does not make conservative.
- Zero boundary: ``sum(z') - sum(z) = -k * (w1 sum(first row) + w2 sum(last row) + w3 sum(first column) +
  w4 sum(last column))``: heat flows out through the walls.
- Discrete maximum principle: if ``w_i >= 0`` and ``0 <= k W <= 1`` each output is a convex combination of
  its stencil inputs (centre weight ``1 - k W``, neighbour weights ``k w_i``), so it lies within their
  ``[min, max]`` (the padded ghost values included). :func:`stable_coefficients` guarantees this.
- With symmetric, positive weights, insulated walls and ``k W <= 1``, repeated steps converge to the
  per-channel mean.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

__all__ = [
    "BOUNDARIES",
    "Boundary",
    "fdm_heat_step",
    "heat_stencil",
    "neighbour_count",
    "neighbour_mean",
    "replicate_pad1",
    "stable_coefficients",
]

Boundary = Literal["insulated", "zeros"]
BOUNDARIES: tuple[str, ...] = ("insulated", "zeros")


def heat_stencil(weight: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 kernel of ``N(z) - W z`` (HcNet, Heat Conduction Layer) from per-channel weights ``(C, 4)``.

    ``weight[:, 0..3] = w1..w4`` multiply ``z[i+1, j]``, ``z[i-1, j]``, ``z[i, j+1]``, ``z[i, j-1]``.
    Returns ``(C, 1, 3, 3)`` for ``F.conv2d(..., groups=C)`` (a cross-correlation: ``kernel[a, b]``
    multiplies ``z[i + a - 1, j + b - 1]``). Differentiable in ``weight``.
    """
    if weight.ndim != 2 or weight.shape[1] != 4:
        raise ValueError(f"stencil weights must have shape (channels, 4), got {tuple(weight.shape)}")
    w1, w2, w3, w4 = weight.unbind(-1)
    zero = torch.zeros_like(w1)
    centre = -(w1 + w2 + w3 + w4)
    rows = (zero, w2, zero, w4, centre, w3, zero, w1, zero)  # row i-1, row i, row i+1
    return torch.stack(rows, dim=-1).view(-1, 1, 3, 3)


def stable_coefficients(raw_weight: torch.Tensor, k: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """HcNet's stencil in the ``stable`` parametrisation: ``w = softplus(raw)``, ``k' = k / max(W, 1)``.

    For ``0 <= k <= 1`` this gives ``w_i >= 0`` and ``k' W = k W / max(W, 1) <= k <= 1``: every explicit step
    is a convex combination of the stencil inputs (the discrete maximum principle). Where ``W <= 1`` the
    step is the paper's formula unchanged. ``raw_weight`` is ``(C, 4)``; ``k`` a float or a tensor that
    broadcasts against ``(B, C, 1, 1)``. Returns ``(w, k')`` with ``k'`` of shape ``(..., C, 1, 1)``.
    """
    weight = F.softplus(raw_weight)
    total = weight.sum(-1).clamp(min=1.0).view(-1, 1, 1)
    return weight, k / total


def replicate_pad1(z: torch.Tensor) -> torch.Tensor:
    """Pad the last two dimensions by one edge-replicated cell on each side (Neumann ghost cells).

    The same values as ``F.pad(z, (1, 1, 1, 1), mode="replicate")``, written with slicing and concatenation so
    that its backward is plain indexing: TorchInductor has no kernel for ``replication_pad2d_backward``, which
    made ``torch.compile`` fail in training with the insulated boundary. :func:`fdm_heat_step` uses it under
    compilation and ``F.pad`` in eager mode (faster there).
    """
    z = torch.cat((z[..., :1, :], z, z[..., -1:, :]), dim=-2)
    return torch.cat((z[..., :1], z, z[..., -1:]), dim=-1)


def fdm_heat_step(
    z: torch.Tensor,
    weight: torch.Tensor,
    k: torch.Tensor | float,
    steps: int = 1,
    boundary: Boundary = "insulated",
) -> torch.Tensor:
    """``steps`` explicit steps ``z <- z + k (N(z) - W z)`` of the anisotropic heat equation (HcNet, HcL).

    Args:
        z: NCHW ``(B, C, H, W)``; any ``H, W >= 1``.
        weight: ``(C, 4)`` stencil weights ``w1..w4`` (see :func:`heat_stencil`).
        k: step size, a float or a tensor broadcasting against ``(B, C, 1, 1)`` (e.g. per sample and
            channel); the same ``k`` is used in every step.
        steps: number of explicit steps (each one depthwise 3x3 convolution).
        boundary: ``"insulated"`` (edge replication, Neumann) or ``"zeros"`` (zero padding, Dirichlet).

    Returns: NCHW, same shape and dtype as ``z``.
    """
    if z.ndim != 4:
        raise ValueError(f"expected an NCHW tensor (batch, channels, height, width), got shape {tuple(z.shape)}")
    if weight.shape[0] != z.shape[1]:
        raise ValueError(f"{weight.shape[0]} stencil weights for {z.shape[1]} channels")
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    kernel = heat_stencil(weight).to(z.dtype)
    if isinstance(k, torch.Tensor):
        k = k.to(z.dtype)
    channels = z.shape[1]
    for _ in range(steps):
        if boundary == "insulated":
            # eager: torch's replication pad (faster); compiled: the same values from slices (Inductor has no
            # replication_pad2d_backward)
            padded = replicate_pad1(z) if torch.compiler.is_compiling() else F.pad(z, (1, 1, 1, 1), mode="replicate")
            lap = F.conv2d(padded, kernel, groups=channels)
        else:
            lap = F.conv2d(z, kernel, padding=1, groups=channels)
        z = z + k * lap
    return z


def neighbour_count(x: torch.Tensor) -> torch.Tensor:
    """How many of its 8 neighbours each pixel of ``x`` (NCHW) has inside the image: ``(1, 1, H, W)``, 8 inside,
    5 on an edge, 3 at a corner (the HcNet authors' ``mean_num``: a 3x3 sum of ones, minus the centre)."""
    ones = torch.ones_like(x[:1, :1])
    return F.avg_pool2d(ones, 3, stride=1, padding=1, count_include_pad=True) * 9.0 - 1.0


def neighbour_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of each pixel's 8 neighbours inside the image (NCHW in and out): the 3x3 sum minus the centre,
    divided by :func:`neighbour_count` (the HcNet authors' heat step ``x + alpha (mean - x)``). A 1x1 map has no
    neighbours: its mean is the pixel itself, so the step leaves it unchanged (the authors' division gives NaN)."""
    around = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=True) * 9.0 - x
    count = neighbour_count(x)
    return torch.where(count > 0, around / count.clamp(min=1.0), x)
