"""Explicit heat steps against independent numpy / scipy stencils, and the physics they must keep."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage
import torch
import torch.nn.functional as F

from pdevision.ops import fdm_heat_step, heat_stencil, replicate_pad1, stable_coefficients


def _np_step(z: np.ndarray, w: np.ndarray, k: np.ndarray, boundary: str) -> np.ndarray:
    """One step ``z + k (w1 z[i+1,j] + w2 z[i-1,j] + w3 z[i,j+1] + w4 z[i,j-1] - W z)`` by array slicing.

    z: (B, C, H, W); w: (C, 4); k: (B, C).
    """
    mode = "edge" if boundary == "insulated" else "constant"
    p = np.pad(z, ((0, 0), (0, 0), (1, 1), (1, 1)), mode=mode)
    down, up = p[:, :, 2:, 1:-1], p[:, :, :-2, 1:-1]  # z[i+1, j], z[i-1, j]
    right, left = p[:, :, 1:-1, 2:], p[:, :, 1:-1, :-2]  # z[i, j+1], z[i, j-1]
    w1, w2, w3, w4 = (w[None, :, i, None, None] for i in range(4))
    neighbours = w1 * down + w2 * up + w3 * right + w4 * left
    return z + k[:, :, None, None] * (neighbours - (w1 + w2 + w3 + w4) * z)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a)


@pytest.mark.parametrize(("boundary", "mode"), [("insulated", "nearest"), ("zeros", "constant")])
def test_isotropic_equals_five_point_laplacian_scipy(boundary: str, mode: str) -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 3, 7, 9))
    w, k = 0.7, 0.3
    out = fdm_heat_step(_t(z), torch.full((3, 4), w, dtype=torch.float64), k, boundary=boundary).numpy()
    ref = np.stack([[zc + k * w * scipy.ndimage.laplace(zc, mode=mode, cval=0.0) for zc in zb] for zb in z])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("boundary", ["insulated", "zeros"])
def test_anisotropic_weighted_stencil_matches_numpy(boundary: str) -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(size=(3, 4, 6, 11))
    w = rng.normal(size=(4, 4))  # any sign: the paper's unconstrained weights
    k = rng.uniform(size=(3, 4))
    out = fdm_heat_step(_t(z), _t(w), _t(k)[:, :, None, None], boundary=boundary).numpy()
    np.testing.assert_allclose(out, _np_step(z, w, k, boundary), rtol=1e-12, atol=1e-12)


def test_stencil_layout() -> None:
    kernel = heat_stencil(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    expected = torch.tensor([[0.0, 2.0, 0.0], [4.0, -10.0, 3.0], [0.0, 1.0, 0.0]])  # rows i-1, i, i+1
    torch.testing.assert_close(kernel, expected.view(1, 1, 3, 3))
    with pytest.raises(ValueError, match=r"shape \(channels, 4\)"):
        heat_stencil(torch.ones(3, 5))


def test_insulated_conserves_sum_for_axis_symmetric_weights() -> None:
    """w1 == w2 and w3 == w4 per channel (anisotropic between the axes): sum conserved per sample and channel."""
    rng = np.random.default_rng(2)
    z = rng.normal(size=(2, 5, 8, 13)) + 3.0
    a, b = rng.uniform(0.0, 2.0, size=(2, 5))
    w = np.stack([a, a, b, b], axis=1)
    k = rng.uniform(size=(2, 5))
    out = fdm_heat_step(_t(z), _t(w), _t(k)[:, :, None, None], steps=3).numpy()
    np.testing.assert_allclose(out.sum(axis=(2, 3)), z.sum(axis=(2, 3)), rtol=1e-12)
    assert np.abs(out - z).max() > 1e-2  # and the field did change


def test_insulated_sum_drift_of_asymmetric_weights_is_the_boundary_term() -> None:
    """sum(z') - sum(z) = k ((w1 - w2)(last row - first row) + (w3 - w4)(last col - first col))."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=(2, 4, 6, 7))
    w = rng.normal(size=(4, 4))
    k = rng.uniform(size=(2, 4))
    out = fdm_heat_step(_t(z), _t(w), _t(k)[:, :, None, None]).numpy()
    rows = z[:, :, -1, :].sum(-1) - z[:, :, 0, :].sum(-1)
    cols = z[:, :, :, -1].sum(-1) - z[:, :, :, 0].sum(-1)
    drift = k * ((w[:, 0] - w[:, 1]) * rows + (w[:, 2] - w[:, 3]) * cols)
    np.testing.assert_allclose(out.sum(axis=(2, 3)) - z.sum(axis=(2, 3)), drift, rtol=1e-10, atol=1e-12)
    assert np.abs(drift).min() > 1e-3  # so the sum is genuinely not conserved here


def test_zero_boundary_leaks_heat_through_the_walls() -> None:
    """sum(z') - sum(z) = -k (w1 first row + w2 last row + w3 first col + w4 last col)."""
    rng = np.random.default_rng(4)
    z = rng.uniform(1.0, 2.0, size=(1, 3, 5, 6))
    w = rng.uniform(0.1, 1.0, size=(3, 4))
    k = np.full((1, 3), 0.2)
    out = fdm_heat_step(_t(z), _t(w), 0.2, boundary="zeros").numpy()
    first_row, last_row = z[:, :, 0, :].sum(-1), z[:, :, -1, :].sum(-1)
    first_col, last_col = z[:, :, :, 0].sum(-1), z[:, :, :, -1].sum(-1)
    drift = -k * (w[:, 0] * first_row + w[:, 1] * last_row + w[:, 2] * first_col + w[:, 3] * last_col)
    np.testing.assert_allclose(out.sum(axis=(2, 3)) - z.sum(axis=(2, 3)), drift, rtol=1e-10)
    assert (drift < 0).all()


@pytest.mark.parametrize("weights", [(1.0, 1.0, 1.0, 1.0), (0.3, 0.3, 1.5, 1.5)])
def test_repeated_insulated_steps_converge_to_the_mean(weights: tuple[float, ...]) -> None:
    z = torch.rand(2, 3, 3, 5, dtype=torch.float64)
    w = torch.tensor([weights] * 3, dtype=torch.float64)
    k = 0.9 / sum(weights)  # k W < 1
    out = fdm_heat_step(z, w, k, steps=300)
    mean = z.mean(dim=(2, 3), keepdim=True)
    torch.testing.assert_close(out, mean.expand_as(out), rtol=0, atol=1e-7)
    assert (z - mean).abs().max() > 0.1


def test_steps_equal_repeated_single_steps() -> None:
    z = torch.randn(2, 3, 9, 7, dtype=torch.float64)
    w = torch.randn(3, 4, dtype=torch.float64)
    k = torch.rand(2, 3, 1, 1, dtype=torch.float64)
    for boundary in ("insulated", "zeros"):
        once = z
        for _ in range(4):
            once = fdm_heat_step(once, w, k, boundary=boundary)
        torch.testing.assert_close(fdm_heat_step(z, w, k, steps=4, boundary=boundary), once)


def test_steps_reach_m_pixels() -> None:
    z = torch.zeros(1, 1, 11, 11)
    z[0, 0, 5, 5] = 1.0
    out = fdm_heat_step(z, torch.ones(1, 4), 0.2, steps=3)
    support = (out[0, 0] != 0).nonzero()
    assert (support - 5).abs().sum(-1).max() == 3  # the 3-step diamond


def test_stable_coefficients_bound_k_times_w() -> None:
    raw = torch.randn(64, 4) * 5
    k = torch.rand(8, 64, 1, 1)
    w, k_eff = stable_coefficients(raw, k)
    assert (w > 0).all()
    assert (k_eff * w.sum(-1)[:, None, None] <= 1 + 1e-6).all()
    small = w.sum(-1) <= 1  # below W = 1 the step is the paper's formula unchanged
    torch.testing.assert_close(k_eff[:, small], k[:, small])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="NCHW"):
        fdm_heat_step(torch.zeros(3, 4, 4), torch.ones(3, 4), 0.1)
    with pytest.raises(ValueError, match="2 stencil weights for 3 channels"):
        fdm_heat_step(torch.zeros(1, 3, 4, 4), torch.ones(2, 4), 0.1)
    with pytest.raises(ValueError, match="boundary"):
        fdm_heat_step(torch.zeros(1, 3, 4, 4), torch.ones(3, 4), 0.1, boundary="periodic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps"):
        fdm_heat_step(torch.zeros(1, 3, 4, 4), torch.ones(3, 4), 0.1, steps=0)


def test_one_pixel_image() -> None:
    z = torch.randn(2, 3, 1, 1)
    torch.testing.assert_close(fdm_heat_step(z, torch.rand(3, 4), 0.5), z)


def test_replicate_pad_equals_torch_and_numpy_edge_padding() -> None:
    z = torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    ours = replicate_pad1(z)
    torch.testing.assert_close(ours, F.pad(z, (1, 1, 1, 1), mode="replicate"), rtol=0, atol=0)
    ref = np.pad(z.detach().numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    np.testing.assert_array_equal(ours.detach().numpy(), ref)
    # the same gradient as the old replication-pad path (edge cells collect their ghosts)
    w = torch.randn_like(ours)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), z)
    (g_ref,) = torch.autograd.grad((F.pad(z, (1, 1, 1, 1), mode="replicate") * w).sum(), z)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-12, atol=1e-12)


def test_insulated_step_trains_under_torch_compile() -> None:
    """Inductor has no replication_pad2d_backward; the insulated step must compile forward and backward."""
    torch._dynamo.reset()
    z = torch.randn(2, 3, 6, 5, requires_grad=True)
    weight = torch.rand(3, 4, requires_grad=True)
    step = torch.compile(lambda z, w: fdm_heat_step(z, w, 0.3, steps=2, boundary="insulated"), fullgraph=True)
    out = step(z, weight)
    out.square().sum().backward()
    ref_z, ref_w = z.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref = fdm_heat_step(ref_z, ref_w, 0.3, steps=2, boundary="insulated")
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(z.grad, ref_z.grad)
    torch.testing.assert_close(weight.grad, ref_w.grad)
