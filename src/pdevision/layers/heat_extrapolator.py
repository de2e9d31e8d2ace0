"""QB-Heat's feature predictor: extrapolation of a visible block's features with the first-order heat prior.

QB-Heat (Chen et al., "Self-Supervised Learning based on Heat Equation", arXiv:2211.13228, Sec. 3) drops the
time derivative of the heat equation, makes the Laplacian anisotropic in feature space and splits it into two
first-order linear systems, ``dz/dx = A z`` and ``dz/dy = B z``, with learnable ``d x d`` matrices ``A`` and ``B``.
Features of the hidden cells are then extrapolated outward from the border of the visible block:

* discrete (as published): ``z(x + dx) = (I + dx A) z(x)``, applied step by step, cell after cell
  (towards ``-x``: ``z(x - dx) = (I - dx A) z(x)``); the same with ``B`` along ``y``;
* exact (option): ``z(x + s) = expm(s A) z(x)`` for any signed distance ``s`` (``torch.linalg.matrix_exp``).

Axes: ``x`` is the width (last) axis, growing to the right; ``y`` is the height axis, growing downward.

Corners (cells beyond the block in both directions): ``corner="xy"`` extends the block's rows along ``x`` first
and then every column of that band along ``y``, so a corner cell is ``P_y(n) P_x(m) z_c`` (``z_c`` the block's
corner cell, ``m``/``n`` the distances); ``"yx"`` gives ``P_x(m) P_y(n) z_c``; ``"mean"`` (default) averages both
orders. The orders agree when ``A`` and ``B`` commute (``AB = BA`` is also the integrability condition of the
two equations); only corner cells differ between the three rules.

Stability (no overflow at distances of dozens of cells). The same ``A`` must drive extrapolation to the left and
to the right, so a solution that stays bounded both ways needs a spectrum on the imaginary axis; dissipative
matrices (``Re lambda < 0``) decay one way and blow up the other. Hence, with ``constraint="skew"`` (default):

* ``A = W_A - W_A^T`` (skew-symmetric), so ``expm(s A)`` is orthogonal for every ``s``: the exact predictor
  preserves ``||z||`` at any distance;
* the rate is capped, ``dx ||A||_2 <= max_rate`` (``A`` is rescaled by ``min(1, max_rate / (dx ||A||_2))``;
  spectral norm by SVD), so one forward-Euler step ``I + dx A`` has gain ``sqrt(1 + dx^2 ||A z||^2 / ||z||^2)``
  ``<= sqrt(1 + max_rate^2)``: after ``n`` steps ``||z_n|| <= (1 + max_rate^2)^(n/2) ||z_0||`` (1.07x after
  ``n = 4`` and 6.2x after 60 steps at the default ``max_rate = 0.25``).

``constraint="none"`` uses ``A = W_A`` as published. This class caps its rate only when ``max_rate`` is a number
(gains ``<= (1 + max_rate)^n`` discrete, ``<= exp(n max_rate)`` exact: fine for the few cells of a quarter block,
not for long distances); ``max_rate=None`` removes the cap. :class:`pdevision.models.QBHeat`, :class:`PretrainConfig`
and ``pdevision pretrain`` resolve ``max_rate="auto"`` to no cap for ``"none"``, so there ``constraint="none"``
alone is the published, uncapped predictor. ``W_A = W_B = 0`` at initialisation: the predictor starts as a copy of the
nearest border feature (replicate padding).
"""

from __future__ import annotations

import torch
from torch import nn

MODES = ("discrete", "exact")
CORNERS = ("mean", "xy", "yx")
CONSTRAINTS = ("skew", "none")


def propagate(border: torch.Tensor, generator: torch.Tensor, steps: int, mode: str, dx: float) -> torch.Tensor:
    """Features at distances ``1..|steps|`` cells from ``border`` along one axis, in the sign of ``steps``.

    ``dz/ds = G z`` (QB-Heat, arXiv:2211.13228, Sec. 3). ``border``: ``(B, d, L)`` (a border row or column of
    ``L`` cells); ``generator``: ``(d, d)``. Returns ``(B, d, L, |steps|)``, index ``k`` at distance ``k + 1``.
    Discrete: ``z_{k+1} = (I + sign dx G) z_k`` step by step; exact: ``z_k = expm(sign k dx G) z_0``.
    """
    n, sign = abs(steps), (1.0 if steps >= 0 else -1.0)
    b, d, length = border.shape
    if n == 0:
        return border.new_zeros(b, d, length, 0)
    if mode == "discrete":
        step = torch.eye(d, dtype=generator.dtype, device=generator.device) + (sign * dx) * generator
        out, z = [], border
        for _ in range(n):
            z = torch.einsum("ij,bjl->bil", step, z)
            out.append(z)
        return torch.stack(out, dim=-1)
    if mode == "exact":
        dist = sign * dx * torch.arange(1, n + 1, dtype=generator.dtype, device=generator.device)
        prop = torch.linalg.matrix_exp(dist[:, None, None] * generator)  # (n, d, d)
        return torch.einsum("nij,bjl->biln", prop, border)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def extend_width(z: torch.Tensor, left: int, width: int, generator: torch.Tensor, mode: str, dx: float) -> torch.Tensor:
    """Extend a block ``(B, d, h, w)`` (NCHW) placed at column ``left`` to ``width`` columns along ``x``:
    ``(B, d, h, width)``, the block unchanged at columns ``left .. left + w - 1``."""
    w = z.shape[-1]
    right = width - left - w
    before = propagate(z[..., 0], generator, -left, mode, dx).flip(-1)
    after = propagate(z[..., -1], generator, right, mode, dx)
    return torch.cat([before, z, after], dim=-1)


def extend_height(
    z: torch.Tensor, top: int, height: int, generator: torch.Tensor, mode: str, dx: float
) -> torch.Tensor:
    """:func:`extend_width` along ``y`` (the height axis, downward): ``(B, d, h, W)`` to ``(B, d, height, W)``."""
    return extend_width(z.transpose(-1, -2), top, height, generator, mode, dx).transpose(-1, -2)


class HeatExtrapolator(nn.Module):
    """QB-Heat predictor ``dz/dx = A z, dz/dy = B z`` (arXiv:2211.13228, Sec. 3): block features to a full grid.

    Args:
        dim: feature channels ``d`` (``A``, ``B`` are ``d x d``).
        mode: ``"discrete"`` (``z(x + dx) = (I + dx A) z(x)`` step by step, as published) or ``"exact"``
            (``z(x + s) = expm(s A) z(x)``).
        corner: ``"mean"`` (average of both orders), ``"xy"`` (along ``x`` first) or ``"yx"``.
        constraint: ``"skew"`` (``A = W - W^T``, norm-preserving exact propagator) or ``"none"`` (``A = W``).
        max_rate: cap on ``dx ||A||_2`` and ``dx ||B||_2`` (``None``: no cap). See the module docstring.
        dx: the spacing of feature cells (1: distances counted in cells).

    ``forward(z, grid, offset)``: ``z`` ``(B, d, h, w)`` NCHW features of the visible block, ``grid`` the full
    ``(H, W)`` in cells, ``offset`` the block's ``(top, left)`` cell; returns ``(B, d, H, W)`` NCHW with ``z``
    unchanged in the block.
    """

    def __init__(
        self,
        dim: int,
        mode: str = "discrete",
        corner: str = "mean",
        constraint: str = "skew",
        max_rate: float | None = 0.25,
        dx: float = 1.0,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"predictor mode must be one of {MODES}, got {mode!r}")
        if corner not in CORNERS:
            raise ValueError(f"corner rule must be one of {CORNERS}, got {corner!r}")
        if constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
        if max_rate is not None and max_rate <= 0:
            raise ValueError(f"max_rate must be positive or None, got {max_rate}")
        if dx <= 0:
            raise ValueError(f"dx must be positive, got {dx}")
        self.dim, self.mode, self.corner, self.constraint = dim, mode, corner, constraint
        self.max_rate, self.dx = max_rate, float(dx)
        self.weight_a = nn.Parameter(torch.zeros(dim, dim))
        self.weight_b = nn.Parameter(torch.zeros(dim, dim))

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, mode={self.mode}, corner={self.corner}, constraint={self.constraint}, "
            f"max_rate={self.max_rate}, dx={self.dx}"
        )

    def _generator(self, weight: torch.Tensor) -> torch.Tensor:
        g = weight - weight.transpose(0, 1) if self.constraint == "skew" else weight
        if self.max_rate is None:
            return g
        norm = torch.linalg.matrix_norm(g.float(), ord=2).to(g.dtype)
        scale = (self.max_rate / (self.dx * norm).clamp_min(1e-12)).clamp(max=1.0)
        return g * scale

    def generators(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The constrained ``(A, B)``, each ``(d, d)``."""
        return self._generator(self.weight_a), self._generator(self.weight_b)

    @torch.no_grad()
    def set_generators(self, a: torch.Tensor, b: torch.Tensor) -> None:
        """Set the raw weights so that :meth:`generators` returns ``(a, b)`` (before the rate cap); with
        ``constraint="skew"`` both must be skew-symmetric."""
        for weight, g in ((self.weight_a, a), (self.weight_b, b)):
            if self.constraint == "skew":
                if not torch.allclose(g, -g.transpose(0, 1), atol=1e-6):
                    raise ValueError("with constraint='skew' the generators must be skew-symmetric")
                weight.copy_(g / 2)
            else:
                weight.copy_(g)

    def forward(self, z: torch.Tensor, grid: tuple[int, int], offset: tuple[int, int]) -> torch.Tensor:
        if z.ndim != 4 or z.shape[1] != self.dim:
            raise ValueError(f"expected block features (B, {self.dim}, h, w), got {tuple(z.shape)}")
        (height, width), (top, left) = grid, offset
        h, w = z.shape[-2:]
        if top < 0 or left < 0 or top + h > height or left + w > width:
            raise ValueError(f"a {h}x{w} block at cell (top={top}, left={left}) does not fit a {height}x{width} grid")
        a, b = self.generators()
        a, b = a.to(z.dtype), b.to(z.dtype)

        mode, dx = self.mode, self.dx

        def xy() -> torch.Tensor:
            return extend_height(extend_width(z, left, width, a, mode, dx), top, height, b, mode, dx)

        def yx() -> torch.Tensor:
            return extend_width(extend_height(z, top, height, b, mode, dx), left, width, a, mode, dx)

        if self.corner == "xy":
            return xy()
        if self.corner == "yx":
            return yx()
        return 0.5 * (xy() + yx())
