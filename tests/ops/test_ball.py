"""The bounded activations: formulas, bounds, and the groups they commute with."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pdevision.ops.ball import hardball, hardtanh, softball


def _rotate(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,bjhw->bihw", q, x)


def _orthogonal(n: int, seed: int = 0) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def test_hardtanh_clips_entries() -> None:
    x = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.7, 1.0, 2.5])
    torch.testing.assert_close(hardtanh(x), torch.tensor([-1.0, -1.0, -0.5, 0.0, 0.7, 1.0, 1.0]))
    torch.testing.assert_close(hardtanh(x, bound=2.0), x.clamp(-2, 2))


def test_hardball_projects_onto_ball_of_radius_sqrt_n() -> None:
    x = torch.randn(2, 9, 5, 4, dtype=torch.float64) * 1.1
    y = hardball(x)
    norms_x = x.norm(dim=1)
    norms_y = y.norm(dim=1)
    outside = norms_x > 3.0  # sqrt(9)
    assert outside.any() and (~outside).any()
    torch.testing.assert_close(norms_y[outside], torch.full_like(norms_y[outside], 3.0))
    torch.testing.assert_close(y.permute(0, 2, 3, 1)[~outside], x.permute(0, 2, 3, 1)[~outside])
    # same direction
    cos = (x * y).sum(1) / (norms_x * norms_y)
    torch.testing.assert_close(cos, torch.ones_like(cos))
    torch.testing.assert_close(hardball(x, radius=1.0).norm(dim=1).max(), torch.tensor(1.0, dtype=torch.float64))


def test_softball_formula_and_bound() -> None:
    x = torch.randn(3, 4, 6, 5, dtype=torch.float64) * 5
    xn = x.numpy()
    ref = xn / np.sqrt(1 + (xn**2).sum(1, keepdims=True) / 4.0)  # R^2 = n = 4
    np.testing.assert_allclose(softball(x).numpy(), ref, rtol=1e-12)
    assert bool((softball(x).norm(dim=1) < 2.0).all())
    small = x * 1e-4
    torch.testing.assert_close(softball(small), small, rtol=1e-6, atol=0)
    np.testing.assert_allclose(
        softball(x, radius=0.5).numpy(), xn / np.sqrt(1 + (xn**2).sum(1, keepdims=True) / 0.25), rtol=1e-12
    )


def test_channel_dim_argument_for_nhwc() -> None:
    x = torch.randn(2, 5, 6, 7, dtype=torch.float64) * 3
    torch.testing.assert_close(softball(x.permute(0, 2, 3, 1), dim=-1), softball(x).permute(0, 2, 3, 1))
    torch.testing.assert_close(hardball(x.permute(0, 2, 3, 1), dim=-1), hardball(x).permute(0, 2, 3, 1))


@pytest.mark.parametrize("fn", [hardball, softball])
def test_radial_activations_commute_with_orthogonal_maps_only(fn) -> None:
    x = torch.randn(2, 6, 4, 4, dtype=torch.float64) * 3
    q = _orthogonal(6)
    torch.testing.assert_close(fn(_rotate(x, q)), _rotate(fn(x), q))
    scale = torch.diag(torch.tensor([2.0, 1, 1, 1, 1, 0.5], dtype=torch.float64))
    assert (fn(_rotate(x, scale)) - _rotate(fn(x), scale)).abs().max() > 1e-2


def test_hardtanh_commutes_with_signed_permutations_not_rotations() -> None:
    x = torch.randn(2, 5, 3, 3, dtype=torch.float64) * 2
    p = torch.zeros(5, 5, dtype=torch.float64)
    p[torch.arange(5), torch.tensor([2, 0, 4, 1, 3])] = torch.tensor([1.0, -1, -1, 1, -1], dtype=torch.float64)
    torch.testing.assert_close(hardtanh(_rotate(x, p)), _rotate(hardtanh(x), p))
    q = _orthogonal(5)
    assert (hardtanh(_rotate(x, q)) - _rotate(hardtanh(x), q)).abs().max() > 1e-2


def test_finite_gradients_at_zero_and_inside() -> None:
    x = torch.zeros(1, 4, 2, 2, requires_grad=True)
    (hardball(x).sum() + softball(x).sum()).backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_bad_radius() -> None:
    with pytest.raises(ValueError, match="radius must be positive"):
        softball(torch.randn(1, 2, 1, 1), radius=0.0)
    with pytest.raises(ValueError, match="radius must be positive"):
        hardball(torch.randn(1, 2, 1, 1), radius=-1.0)


def test_default_radius_is_sqrt_channels() -> None:
    x = torch.full((1, 16, 1, 1), 100.0)
    assert math.isclose(float(hardball(x).norm()), 4.0, rel_tol=1e-6)
