"""heat_conduct is the exact heat-equation solution with insulated boundaries.

References independent of the code under test: scipy's DCT, the analytic solution of single
cosine modes, and a converged explicit finite-difference solve with reflecting ghost cells.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft
import torch

from pdevision.ops import frequency_energy, heat_conduct, resize_spectrum


def _scipy_heat(u0: np.ndarray, k: float | np.ndarray, t: float) -> np.ndarray:
    h, w = u0.shape[-2:]
    wy = np.arange(h) * np.pi / h
    wx = np.arange(w) * np.pi / w
    energy = wy[:, None] ** 2 + wx[None, :] ** 2
    coeff = scipy.fft.dctn(u0, type=2, norm="ortho", axes=(-2, -1))
    return scipy.fft.idctn(coeff * np.exp(-k * t * energy), type=2, norm="ortho", axes=(-2, -1))


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_matches_scipy_reference(method: str) -> None:
    u0 = torch.randn(2, 3, 11, 8)
    out = heat_conduct(u0, k=0.7, t=1.3, method=method)
    np.testing.assert_allclose(out.numpy(), _scipy_heat(u0.double().numpy(), 0.7, 1.3), atol=1e-5)


def test_per_frequency_channel_diffusivity_matches_scipy() -> None:
    u0 = torch.randn(2, 4, 6, 9, dtype=torch.float64)
    k = torch.rand(4, 6, 9, dtype=torch.float64)
    out = heat_conduct(u0, k=k, t=0.5)
    np.testing.assert_allclose(out.numpy(), _scipy_heat(u0.numpy(), k.numpy(), 0.5), atol=1e-12)
    # the same field in NHWC layout with k laid out (H, W, C)
    out_nhwc = heat_conduct(u0.permute(0, 2, 3, 1), k=k.permute(1, 2, 0), t=0.5, dims=(1, 2))
    np.testing.assert_allclose(out_nhwc.permute(0, 3, 1, 2).numpy(), out.numpy(), atol=1e-12)


@pytest.mark.parametrize(("n", "m"), [(0, 1), (3, 2), (5, 0), (7, 6)])
def test_single_cosine_mode_decays_analytically(n: int, m: int) -> None:
    """u0 = cos(w_n x) cos(w_m y) solves u_t = k lap(u), u_n = 0 on [0,H]x[0,W] as exp(-k t (w_n^2+w_m^2)) u0."""
    h, w, k, t = 12, 9, 0.3, 2.0
    y = np.arange(h)[:, None] + 0.5
    x = np.arange(w)[None, :] + 0.5
    u0 = np.cos(n * np.pi / h * y) * np.cos(m * np.pi / w * x)
    exact = math.exp(-k * t * ((n * np.pi / h) ** 2 + (m * np.pi / w) ** 2)) * u0
    out = heat_conduct(torch.from_numpy(u0), k=k, t=t).numpy()
    np.testing.assert_allclose(out, exact, atol=1e-12)


def _fd_heat(u0: np.ndarray, kt: float, dt: float = 0.05) -> np.ndarray:
    """Explicit 5-point finite differences, unit spacing, insulated walls by mirrored ghost cells."""
    steps = math.ceil(kt / dt)
    dt = kt / steps
    u = u0.copy()
    for _ in range(steps):
        p = np.pad(u, 1, mode="edge")
        lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * u
        u = u + dt * lap
    return u


def test_converges_to_finite_difference_solution_under_refinement() -> None:
    """A smooth field on [0,1]^2 with diffusivity D: spectral and FD solutions agree to O(h^2)."""
    errors = []
    for n in (16, 32):
        c = (np.arange(n) + 0.5) / n
        u0 = np.exp(-((c[:, None] - 0.3) ** 2 + (c[None, :] - 0.6) ** 2) / 0.02)
        kt = 0.004 * n * n  # D T = 0.004 on the unit square, in grid units
        spectral = heat_conduct(torch.from_numpy(u0), k=kt, t=1.0).numpy()
        fd = _fd_heat(u0, kt)
        errors.append(np.abs(spectral - fd).max() / np.abs(u0).max())
    assert errors[1] < 5e-3
    assert errors[1] < errors[0] / 3  # second-order convergence of the reference towards the exact solution


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_conserves_total_heat_and_decays_to_mean(method: str) -> None:
    u0 = torch.rand(3, 2, 10, 13, dtype=torch.float64)
    total = u0.sum(dim=(-2, -1))
    for t in (0.1, 1.0, 10.0):
        u = heat_conduct(u0, k=1.0, t=t, method=method)
        np.testing.assert_allclose(u.sum(dim=(-2, -1)).numpy(), total.numpy(), rtol=1e-12)
    spread = [
        (heat_conduct(u0, k=1.0, t=t, method=method) - u0.mean(dim=(-2, -1), keepdim=True)).abs().max().item()
        for t in (1.0, 10.0, 100.0, 1000.0)
    ]
    assert spread == sorted(spread, reverse=True)
    assert spread[-1] < 1e-10


def test_semigroup_property() -> None:
    u0 = torch.randn(1, 1, 8, 8, dtype=torch.float64)
    once = heat_conduct(u0, k=0.4, t=3.0)
    twice = heat_conduct(heat_conduct(u0, k=0.4, t=1.0), k=0.4, t=2.0)
    np.testing.assert_allclose(once.numpy(), twice.numpy(), atol=1e-12)


def test_gradcheck_in_u0_and_k() -> None:
    u0 = torch.randn(1, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    k = torch.rand(2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: heat_conduct(a, b, 0.7, method="matrix"), (u0, k))
    assert torch.autograd.gradcheck(lambda a, b: heat_conduct(a, b, 0.7, method="fft"), (u0, k))


def test_frequency_energy_grid() -> None:
    e = frequency_energy(4, 6, dtype=torch.float64).numpy()
    assert e.shape == (4, 6)
    assert e[0, 0] == 0.0
    np.testing.assert_allclose(e[1, 2], (np.pi / 4) ** 2 + (2 * np.pi / 6) ** 2)


def test_resize_spectrum_identity_interp_and_pad() -> None:
    spec = torch.randn(7, 5, 3, dtype=torch.float64)
    assert resize_spectrum(spec, (7, 5)) is spec
    out = resize_spectrum(spec, (11, 4))
    assert out.shape == (11, 4, 3)
    # independent reference: np.interp in physical frequency along each axis
    wy_in, wx_in = np.arange(7) / 7, np.arange(5) / 5
    wy_out, wx_out = np.arange(11) / 11, np.arange(4) / 4
    ref = np.empty((11, 4, 3))
    for c in range(3):
        tmp = np.stack([np.interp(wy_out, wy_in, spec[:, j, c].numpy()) for j in range(5)], axis=1)
        ref[:, :, c] = np.stack([np.interp(wx_out, wx_in, tmp[i]) for i in range(11)], axis=0)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-12)
    padded = resize_spectrum(spec, (9, 6), mode="pad")
    assert padded.shape == (9, 6, 3)
    np.testing.assert_array_equal(padded[:7, :5].numpy(), spec.numpy())
    assert padded[7:].abs().sum() == 0 and padded[:, 5:].abs().sum() == 0
    np.testing.assert_array_equal(resize_spectrum(spec, (3, 2), mode="pad").numpy(), spec[:3, :2].numpy())
    with pytest.raises(ValueError, match="'interp' or 'pad'"):
        resize_spectrum(spec, (3, 3), mode="nearest")


def test_invalid_diffusivity_time_or_shape_is_a_clear_error() -> None:
    u = torch.randn(2, 3, 8, 8)
    for k, t in ((-10.0, 1.0), (1.0, -5.0), (float("nan"), 1.0), (1.0, float("inf")), (1 + 1j, 1.0)):
        with pytest.raises(ValueError, match="finite, non-negative"):
            heat_conduct(u, k, t)
    with pytest.raises(ValueError, match="finite, non-negative k"):
        heat_conduct(u, torch.tensor([1.0, -1.0, 1.0]).view(3, 1, 1))
    # a k that broadcasts u0 to a larger shape used to return a result of another shape
    with pytest.raises(
        ValueError, match=r"without adding to their shape; the decay factors have shape \(2, 1, 1, 8, 8\)"
    ):
        heat_conduct(u, torch.ones(2, 1, 1, 1, 1))
    with pytest.raises(TypeError, match="real floating-point tensor"):
        heat_conduct(torch.full((1, 1, 4, 4), 5), 0.1)
    assert torch.equal(heat_conduct(u, 0.0), heat_conduct(u, 1.0, t=0.0))  # zero time or diffusivity: allowed


@pytest.mark.parametrize("size", [(0, 4), (4, 0), (-2, 3), (3, -1)])
@pytest.mark.parametrize("mode", ["interp", "pad", "downstream"])
def test_resize_spectrum_refuses_non_positive_sizes(size: tuple[int, int], mode: str) -> None:
    """A zero or negative size raised ZeroDivisionError (interp) or made empty maps."""
    with pytest.raises(ValueError, match=r"resize_spectrum: the (height|width) must be a positive integer"):
        resize_spectrum(torch.ones(4, 4, 2), size, mode)


@pytest.mark.parametrize("mode", ["interp", "pad", "downstream"])
def test_graph_spectrum_resampling_equals_eager(mode: str) -> None:
    """In a recorded graph the FVE resampling is two products with matrices built from the sizes; the same map as
    the eager rule (linear interpolation, zero padding / cropping, bicubic ``F.interpolate``) at smaller, equal and
    larger sizes."""
    torch.manual_seed(0)
    spec = torch.randn(7, 5, 3)

    class Resize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return resize_spectrum(spec, (x.shape[1], x.shape[2]), mode)

    with torch.no_grad():
        traced = torch.jit.trace(Resize(), torch.zeros(1, 7, 5, 1), check_trace=False)
    for size in [(7, 5), (3, 4), (12, 9), (14, 10), (1, 1)]:
        out = traced(torch.zeros(1, *size, 1))
        torch.testing.assert_close(out, resize_spectrum(spec, size, mode), rtol=1e-5, atol=1e-5, msg=str(size))
