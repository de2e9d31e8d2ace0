"""The heat-prior extrapolator: border copy at A = B = 0, exact and first-order solutions, stability, corners."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pdevision.layers.heat_extrapolator import HeatExtrapolator, propagate


def _skew(d: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, d, generator=g, dtype=torch.float64)
    a = w - w.T
    return scale * a / torch.linalg.matrix_norm(a, ord=2)


@pytest.mark.parametrize("mode", ["discrete", "exact"])
@pytest.mark.parametrize("corner", ["mean", "xy", "yx"])
def test_zero_generators_copy_the_nearest_border_feature(mode: str, corner: str) -> None:
    z = torch.randn(2, 5, 3, 4)
    pred = HeatExtrapolator(5, mode=mode, corner=corner)  # W_A = W_B = 0 at initialisation
    top, left, height, width = 1, 3, 7, 9
    out = pred(z, (height, width), (top, left))
    expected = F.pad(z, (left, width - left - 4, top, height - top - 3), mode="replicate")
    assert out.shape == (2, 5, 7, 9)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_block_is_kept_and_bad_placement_is_a_clear_error() -> None:
    z = torch.randn(1, 4, 2, 2)
    pred = HeatExtrapolator(4)
    pred.set_generators(_skew(4, 0.2, 0).float(), _skew(4, 0.2, 1).float())
    out = pred(z, (6, 6), (2, 3))
    assert torch.equal(out[..., 2:4, 3:5], z)
    with pytest.raises(ValueError, match=r"does not fit a 6x6 grid"):
        pred(z, (6, 6), (5, 0))
    with pytest.raises(ValueError, match=r"expected block features \(B, 4, h, w\)"):
        pred(torch.randn(1, 3, 2, 2), (6, 6), (0, 0))


def _exact_field(a: torch.Tensor, b: torch.Tensor, z0: torch.Tensor, height: int, width: int, dx: float):
    """``z(x, y) = expm(y B) expm(x A) z0`` on a grid with spacing ``dx``: (1, d, height, width)."""
    rows = []
    for i in range(height):
        cols = [torch.linalg.matrix_exp(i * dx * b) @ torch.linalg.matrix_exp(j * dx * a) @ z0 for j in range(width)]
        rows.append(torch.stack(cols, dim=-1))
    return torch.stack(rows, dim=-2).unsqueeze(0)


@pytest.mark.parametrize("corner", ["mean", "xy", "yx"])
def test_exact_predictor_reproduces_the_solution_of_the_two_equations(corner: str) -> None:
    d = 6
    a = _skew(d, 0.3, 0)
    b = 0.5 * a + 0.2 * a @ a @ a  # commutes with A: the two equations are compatible, corners are exact
    z0 = torch.randn(d, dtype=torch.float64)
    field = _exact_field(a, b, z0, 10, 12, 1.0)  # z(x) = expm(x A) z0 along x, expm(y B) along y
    pred = HeatExtrapolator(d, mode="exact", corner=corner, max_rate=None).double()
    pred.set_generators(a, b)
    top, left, h, w = 3, 4, 3, 4
    out = pred(field[..., top : top + h, left : left + w], (10, 12), (top, left))
    torch.testing.assert_close(out, field, rtol=0, atol=1e-5)


def test_exact_predictor_follows_each_axis_with_non_commuting_generators() -> None:
    d = 5
    a, b = _skew(d, 0.4, 2), _skew(d, 0.4, 3)
    z0 = torch.randn(d, dtype=torch.float64)
    pred = HeatExtrapolator(d, mode="exact", max_rate=None).double()
    pred.set_generators(a, b)
    row = torch.stack([torch.linalg.matrix_exp(j * a) @ z0 for j in range(-4, 20)], dim=-1)  # x from -4 to 19
    block = row[:, 4:6].reshape(1, d, 1, 2)
    out = pred(block, (1, 24), (0, 4))
    torch.testing.assert_close(out[0, :, 0], row, rtol=0, atol=1e-5)  # 18 cells to the right, 4 to the left
    col = torch.stack([torch.linalg.matrix_exp(i * b) @ z0 for i in range(-3, 9)], dim=-1)
    out = pred(col[:, 3:4].reshape(1, d, 1, 1), (12, 1), (3, 0))
    torch.testing.assert_close(out[0, :, :, 0], col, rtol=0, atol=1e-5)


@torch.no_grad()
def test_discrete_predictor_is_forward_euler_with_first_order_error() -> None:
    d, length = 6, 2.0  # extrapolate to a fixed distance with finer and finer cells
    a = _skew(d, 1.0, 4)
    z0 = torch.randn(1, d, 1, dtype=torch.float64)
    exact = torch.linalg.matrix_exp(length * a) @ z0[0, :, 0]
    errors = []
    for dx in (0.1, 0.05, 0.025):
        n = round(length / dx)
        pred = HeatExtrapolator(d, mode="discrete", max_rate=None, dx=dx).double()
        pred.set_generators(a, torch.zeros(d, d, dtype=torch.float64))
        out = pred(z0.unsqueeze(-1), (1, n + 1), (0, 0))[0, :, 0, -1]
        euler = torch.linalg.matrix_power(torch.eye(d, dtype=torch.float64) + dx * a, n) @ z0[0, :, 0]
        torch.testing.assert_close(out, euler, rtol=0, atol=1e-12)  # exactly (I + dx A)^n z0, step by step
        errors.append(float((out - exact).norm()))
        # leading error term of forward Euler: (n dx^2 / 2) A^2 expm(L A) z0
        leading = float((n * dx**2 / 2 * a @ a @ exact).norm())
        assert errors[-1] == pytest.approx(leading, rel=0.15)
    assert errors[0] / errors[1] == pytest.approx(2.0, rel=0.08)  # halving dx halves the error
    assert errors[1] / errors[2] == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("mode", ["discrete", "exact"])
@torch.no_grad()
def test_sixty_steps_stay_finite_and_bounded(mode: str) -> None:
    torch.manual_seed(0)
    d, rate = 32, 0.25
    pred = HeatExtrapolator(d, mode=mode, max_rate=rate)
    pred.weight_a.normal_(0, 10.0)  # large raw weights: the constraint, not the initialisation, bounds it
    pred.weight_b.normal_(0, 10.0)
    a, b = pred.generators()
    assert float(torch.linalg.matrix_norm(a, ord=2)) <= rate * (1 + 1e-5)
    assert torch.allclose(a, -a.T) and torch.allclose(b, -b.T)
    z = torch.randn(4, d, 2, 2) * 100
    out = pred(z, (2 + 120, 2 + 120), (60, 60))  # 60 cells of extrapolation in every direction
    assert torch.isfinite(out).all()
    start = z.norm(dim=1).amax()
    # one Euler step with skew A grows a feature's norm by at most sqrt(1 + rate^2), expm(s A) keeps it
    bound = (1 + rate**2) ** (2 * 60 / 2) if mode == "discrete" else 1.0  # corners: 60 steps along x, then y
    assert float(out.norm(dim=1).amax()) <= float(start) * bound * (1 + 1e-4)
    edge = out[..., 60:62, :1].norm(dim=1)  # 60 cells left of the block, along x only
    if mode == "exact":
        torch.testing.assert_close(edge, z[..., :, :1].norm(dim=1), rtol=1e-4, atol=1e-2)  # an isometry


def test_unconstrained_generators_are_rate_capped_and_trainable() -> None:
    pred = HeatExtrapolator(8, constraint="none", max_rate=0.5)
    with torch.no_grad():
        pred.weight_a.normal_(0, 5.0)
    a = pred.generators()[0].detach()
    assert float(torch.linalg.matrix_norm(a, ord=2)) == pytest.approx(0.5, rel=1e-4)
    fresh = HeatExtrapolator(8)  # from A = B = 0 the gradient reaches both matrices
    out = fresh(torch.randn(2, 8, 2, 2), (6, 6), (2, 2))
    (out * torch.randn_like(out)).sum().backward()
    assert fresh.weight_a.grad is not None and fresh.weight_a.grad.abs().sum() > 0
    assert fresh.weight_b.grad is not None and fresh.weight_b.grad.abs().sum() > 0


def test_propagate_counts_distance_from_the_border() -> None:
    a = _skew(3, 0.5, 5)
    border = torch.randn(2, 3, 4, dtype=torch.float64)
    out = propagate(border, a, -3, "exact", 1.0)
    expected = torch.einsum("ij,bjl->bil", torch.linalg.matrix_exp(-3 * a), border)
    torch.testing.assert_close(out[..., 2], expected)
    assert propagate(border, a, 0, "discrete", 1.0).shape == (2, 3, 4, 0)
