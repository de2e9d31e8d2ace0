"""Bounded activations of PDE-ResNet (Liu et al., "A Novel Convolutional Neural Network Architecture with a
Continuous Symmetry", arXiv:2308.01621): ``hardtanh``, ``hardball``, ``softball``.

They sit once per stage, at the downsampling block, to keep the quasi-linear system from blowing up.
``hardtanh`` acts on each entry; ``hardball`` and ``softball`` act on the channel vector of each pixel
(``dim=1`` for NCHW), so they commute with every orthogonal change of the channel basis, which is what keeps
the O(n) weight symmetry of :mod:`pdevision.symmetry`.
"""

from __future__ import annotations

import math

import torch


def _radius(x: torch.Tensor, dim: int, radius: float | None) -> float:
    if radius is None:
        return math.sqrt(x.shape[dim])
    if radius <= 0:
        raise ValueError(f"radius must be positive, got {radius}")
    return float(radius)


def hardtanh(x: torch.Tensor, bound: float = 1.0) -> torch.Tensor:
    """Clip every entry to ``[-bound, bound]``. Any layout; commutes with signed permutations only."""
    return x.clamp(-bound, bound)


def hardball(x: torch.Tensor, radius: float | None = None, dim: int = 1, eps: float = 1e-12) -> torch.Tensor:
    """Project each channel vector onto the ball of radius ``R`` (default ``sqrt(n)``, ``n = x.shape[dim]``):
    ``x * min(1, R / |x|)``, the norm taken over ``dim`` (1 for NCHW). Same shape as ``x``.

    Inside the ball it is the identity; finite gradients everywhere (also at ``x = 0``).
    """
    r = _radius(x, dim, radius)
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    return x * (r / norm.clamp_min(eps)).clamp(max=1.0)


def softball(x: torch.Tensor, radius: float | None = None, dim: int = 1) -> torch.Tensor:
    """``x / sqrt(1 + |x|^2 / R^2)`` per channel vector (norm over ``dim``, 1 for NCHW; ``R`` defaults to
    ``sqrt(n)``): close to the identity for ``|x| << R``, norm below ``R`` always. Same shape as ``x``."""
    r = _radius(x, dim, radius)
    sq = x.square().sum(dim=dim, keepdim=True)
    return x * torch.rsqrt(1.0 + sq / (r * r))
