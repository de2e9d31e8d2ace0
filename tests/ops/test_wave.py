"""The damped wave equation in the DCT basis (``wave_propagate``) against an independent solution, its energy, and
WaveFormer's transfer factor (``wave_transfer``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft
import torch
from scipy.integrate import solve_ivp

from pdevision.ops.wave import WAVE_EPS, wave_propagate, wave_transfer

H, W = 6, 5


def _lam(h: int, w: int, c: float) -> np.ndarray:
    """``c^2 |w|^2`` on the cell-centred Neumann grid: ``w_n = n pi / h``, ``w_m = m pi / w``."""
    wy, wx = np.arange(h) * np.pi / h, np.arange(w) * np.pi / w
    return c * c * (wy[:, None] ** 2 + wx[None, :] ** 2)


def _reference(u0: np.ndarray, v0: np.ndarray, t: float, c: float, alpha: float, axes: tuple[int, int]) -> np.ndarray:
    """scipy's orthonormal DCT-II of the fields, each mode integrated numerically as
    ``a'' + alpha a' + c^2 |w|^2 a = 0`` with ``a(0), a'(0)`` from ``u0, v0``, and the inverse DCT."""
    a0 = scipy.fft.dctn(u0, type=2, norm="ortho", axes=axes)
    b0 = scipy.fft.dctn(v0, type=2, norm="ortho", axes=axes)
    lam = _lam(u0.shape[axes[0]], u0.shape[axes[1]], c)  # indexed (mode along axes[0], mode along axes[1])
    if axes[0] > axes[1]:
        lam = lam.T
    shape = [1] * u0.ndim
    shape[min(axes)], shape[max(axes)] = lam.shape
    lam = np.broadcast_to(lam.reshape(shape), u0.shape).ravel()
    n = lam.size

    def rhs(_: float, y: np.ndarray) -> np.ndarray:
        a, b = y[:n], y[n:]
        return np.concatenate([b, -alpha * b - lam * a])

    y0 = np.concatenate([a0.ravel(), b0.ravel()])
    sol = solve_ivp(rhs, (0.0, t), y0, method="DOP853", rtol=1e-12, atol=1e-12)
    assert sol.success
    at = sol.y[:n, -1].reshape(u0.shape)
    return scipy.fft.idctn(at, type=2, norm="ortho", axes=axes)


# (c, alpha, t): modes with c^2 |w|^2 above and below alpha^2 / 4 (underdamped, overdamped), plus the zero mode
CASES = [
    pytest.param(1.0, 0.0, 1.7, id="undamped"),
    pytest.param(1.0, 2.0, 1.3, id="under-and-overdamped"),
    pytest.param(0.7, 5.0, 0.9, id="mostly-overdamped"),
    pytest.param(1.0, 2 * math.pi / H, 2.0, id="one-mode-critically-damped"),
]


@pytest.mark.parametrize(("c", "alpha", "t"), CASES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NHWC-dims-reversed"])
def test_wave_propagate_matches_per_mode_integration(c: float, alpha: float, t: float, layout: str) -> None:
    lam, critical = _lam(H, W, c), alpha**2 / 4
    kinds = {"under": lam > critical * (1 + 1e-9), "over": (lam < critical * (1 - 1e-9)) & (lam > 0)}
    kinds["critical"] = np.isclose(lam, critical, rtol=1e-9, atol=0)
    counts = {k: int(v.sum()) for k, v in kinds.items()}
    assert lam[0, 0] == 0 and counts["under"] > 0  # every case has the zero mode and oscillating modes
    if alpha == 2.0:
        assert counts["over"] > 0 and counts["critical"] == 0
    if alpha == 5.0:
        assert counts["over"] > counts["under"]
    if alpha == 2 * math.pi / H:
        assert counts["critical"] == 1 and counts["over"] == 0
    gen = torch.Generator().manual_seed(0)
    shape, dims = {
        "NCHW": ((2, 3, H, W), (-2, -1)),
        "NHWC": ((2, H, W, 3), (1, 2)),
        "NHWC-dims-reversed": ((2, W, H, 3), (2, 1)),
    }[layout]
    u0 = torch.randn(shape, generator=gen, dtype=torch.float64)
    v0 = torch.randn(shape, generator=gen, dtype=torch.float64)
    got = wave_propagate(u0, t, c=c, alpha=alpha, v0=v0, dims=dims)
    axes = tuple(d % u0.ndim for d in dims)
    want = _reference(u0.numpy(), v0.numpy(), t, c, alpha, axes)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-8, atol=1e-9)
    assert got.shape == u0.shape and got.dtype == torch.float64


def test_zero_mode_moves_as_a_damped_free_particle() -> None:
    """A constant field with a constant velocity: ``u(t) = u0 + v0 (1 - e^{-alpha t}) / alpha``."""
    u0, v0 = torch.full((1, H, W), 2.0, dtype=torch.float64), torch.full((1, H, W), -0.5, dtype=torch.float64)
    for alpha in (0.0, 0.8):
        drift = 1.3 if alpha == 0 else (1 - math.exp(-alpha * 1.3)) / alpha
        got = wave_propagate(u0, 1.3, c=1.0, alpha=alpha, v0=v0)
        torch.testing.assert_close(got, torch.full_like(u0, 2.0 - 0.5 * drift), rtol=1e-12, atol=1e-12)


def test_float32_and_methods_agree() -> None:
    u0 = torch.randn(2, 3, 17, 12)
    v0 = torch.randn(2, 3, 17, 12)
    ref = wave_propagate(u0.double(), 0.8, c=1.2, alpha=0.3, v0=v0.double())
    for method in ("matrix", "fft"):
        got = wave_propagate(u0, 0.8, c=1.2, alpha=0.3, v0=v0, method=method)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def _mode_energy(u: torch.Tensor, u_t: torch.Tensor, c: float) -> float:
    """``sum over modes of a'^2 + c^2 |w|^2 a^2``."""
    a = scipy.fft.dctn(u.numpy(), type=2, norm="ortho", axes=(-2, -1))
    b = scipy.fft.dctn(u_t.numpy(), type=2, norm="ortho", axes=(-2, -1))
    return float((b**2 + _lam(u.shape[-2], u.shape[-1], c) * a**2).sum())


@pytest.mark.parametrize("with_velocity", [False, True])
def test_energy_is_conserved_without_damping(with_velocity: bool) -> None:
    """``a'(t)`` by central differences of ``wave_propagate`` in ``t``; the energy at ``t = 0`` from the data."""
    gen = torch.Generator().manual_seed(1)
    c, dt = 1.3, 1e-4
    u0 = torch.randn(2, 9, 7, generator=gen, dtype=torch.float64)
    v0 = torch.randn(2, 9, 7, generator=gen, dtype=torch.float64) if with_velocity else torch.zeros_like(u0)
    e0 = _mode_energy(u0, v0, c)
    for t in (0.5, 1.7, 6.1):
        u = wave_propagate(u0, t, c=c, v0=v0)
        u_t = (wave_propagate(u0, t + dt, c=c, v0=v0) - wave_propagate(u0, t - dt, c=c, v0=v0)) / (2 * dt)
        assert _mode_energy(u, u_t, c) == pytest.approx(e0, rel=1e-6)
    # and damping only removes energy: dE/dt = -2 alpha sum a'^2
    energies = []
    for t in (0.5, 1.0, 2.0, 4.0):
        u = wave_propagate(u0, t, c=c, alpha=0.4, v0=v0)
        u_t = wave_propagate(u0, t + dt, c=c, alpha=0.4, v0=v0) - wave_propagate(u0, t - dt, c=c, alpha=0.4, v0=v0)
        energies.append(_mode_energy(u, u_t / (2 * dt), c))
    assert all(b < a for a, b in zip([e0, *energies], energies, strict=False))


def test_wave_transfer_matches_formula() -> None:
    gen = torch.Generator().manual_seed(2)
    t = torch.rand(4, 5, 3, generator=gen, dtype=torch.float64) * 6
    for c, alpha in ((1.0, 0.1), (0.37, 1.5), (2.5, 0.0)):
        got = wave_transfer(t, torch.tensor([c], dtype=torch.float64), torch.tensor([alpha], dtype=torch.float64))
        tn = t.numpy()
        want = np.cos(c * tn) + (1 + alpha / 2) * np.sin(c * tn) / (c + WAVE_EPS)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-13)


def test_wave_transfer_is_the_authors_update_with_equal_field_and_velocity() -> None:
    """Their ``cos(ct) u0 + sin(ct) / (c + eps) (v0 + alpha / 2 u0)`` with ``v0 = u0`` (the same DCT)."""
    gen = torch.Generator().manual_seed(3)
    t, u0 = torch.rand(4, 5, 3, generator=gen, dtype=torch.float64), torch.randn(2, 4, 5, 3, generator=gen)
    c, alpha = torch.tensor([0.8], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64)
    u0 = u0.double()
    authors = torch.cos(c * t) * u0 + torch.sin(c * t) / (c + 1e-8) * (u0 + alpha / 2 * u0)
    torch.testing.assert_close(u0 * wave_transfer(t, c, alpha), authors, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(t=-1.0), "non-negative number t, got -1.0"),
        (dict(t=float("nan")), "number t, got nan"),
        (dict(t=float("inf")), "number t, got inf"),
        (dict(t="1"), "number t, got '1'"),
        (dict(t=True), "number t, got True"),
        (dict(c=-0.5), "number c, got -0.5"),
        (dict(alpha=-1e-3), "number alpha, got -0.001"),
        (dict(alpha=float("nan")), "number alpha, got nan"),
        (dict(v0=torch.zeros(1, 4, 4)), r"v0 must have the shape of u0 \(1, 4, 5\), got \(1, 4, 4\)"),
        (dict(v0=[[0.0] * 5] * 4), "v0 must be a torch.Tensor of the shape of u0 .1, 4, 5., got list"),
    ],
)
def test_bad_arguments_are_one_clear_error(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = dict(t=1.0, c=1.0, alpha=0.0, v0=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match) as info:
        wave_propagate(torch.zeros(1, 4, 5), **args)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
