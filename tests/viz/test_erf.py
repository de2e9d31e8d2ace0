"""ERF maps against what they must be: a 3x3 support for one depthwise 3x3 conv, the heat kernel for heat
conduction with a fixed k (checked against scipy's DCT solution and the variance 2 k t per axis)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.fft
import torch
from torch import nn
from torchvision import transforms as T

from pdevision.ops.heat import heat_conduct
from pdevision.viz import area_share, compute_erf, erf_maps, second_moments
from pdevision.viz.common import photo_images


def _photos(size: int, count: int = 3) -> torch.Tensor:
    tf = T.Compose([T.Resize((size, size), antialias=True), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
    return photo_images(tf, count)[0]


class FixedKHeat(nn.Module):
    """The HCO's solver with a fixed diffusivity: ``u(t) = IDCT2(DCT2(x) exp(-k t |w|^2))`` per channel."""

    def __init__(self, k: float, t: float) -> None:
        super().__init__()
        self.k, self.t = k, t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return heat_conduct(x, self.k, self.t)


def test_depthwise_3x3_erf_is_confined_to_its_support() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 3, 3, padding=1, groups=3)
    images = _photos(33)
    (m,) = erf_maps(conv, images)
    c = 33 // 2
    inside = np.zeros_like(m, dtype=bool)
    inside[c - 1 : c + 2, c - 1 : c + 2] = True
    assert (m[~inside] == 0).all()
    assert (m[inside] > 0).all()
    # the map equals sum over channels of |kernel| (cross-correlation: input pixel c+a-1 gets weight [a])
    expected = conv.weight.detach().abs().sum(dim=(0, 1)).double().numpy()
    np.testing.assert_allclose(m[inside].reshape(3, 3), expected, rtol=1e-5)
    assert area_share(m, 0.95) <= 9 / 33**2
    assert area_share(m, 0.5) < area_share(m, 0.95)


def _scipy_heat_kernel(n: int, kt: float) -> np.ndarray:
    """Neumann heat kernel from the centre pixel by scipy's orthonormal DCT-II (independent of our DCT)."""
    delta = np.zeros((n, n))
    delta[n // 2, n // 2] = 1.0
    w = np.arange(n) * math.pi / n
    energy = w[:, None] ** 2 + w[None, :] ** 2
    return scipy.fft.idctn(scipy.fft.dctn(delta, norm="ortho") * np.exp(-kt * energy), norm="ortho")


@pytest.mark.parametrize(("k", "t"), [(0.5, 4.0), (2.0, 1.0), (1.0, 4.0), (4.0, 2.0)])
def test_fixed_k_heat_erf_is_the_heat_kernel(k: float, t: float) -> None:
    n = 64
    images = _photos(n, 2).double()
    (m,) = erf_maps(FixedKHeat(k, t), images)
    kt = k * t
    # the gradient of the centre output is the (symmetric) kernel, once per input channel
    np.testing.assert_allclose(m, 3 * np.abs(_scipy_heat_kernel(n, kt)), rtol=1e-6, atol=1e-12)
    # variance 2 k t per axis, as the Gaussian solution of u_t = k (u_xx + u_yy) (far from the walls)
    vy, vx = second_moments(m)
    assert vy == pytest.approx(2 * kt, rel=1e-3) and vx == pytest.approx(2 * kt, rel=1e-3)
    # half the mass within the disc r^2 = 2 sigma^2 ln 2: area 4 pi ln(2) k t
    assert area_share(m, 0.5) * n * n == pytest.approx(4 * math.pi * math.log(2) * kt, rel=0.1)


def test_erf_grows_with_kt_and_depends_only_on_kt() -> None:
    images = _photos(48, 2).double()
    maps = {kt: erf_maps(FixedKHeat(1.0, kt), images)[0] for kt in (1.0, 2.0, 4.0, 8.0)}
    shares = [area_share(maps[kt], 0.5) for kt in sorted(maps)]
    assert all(a < b for a, b in itertools.pairwise(shares))
    np.testing.assert_allclose(erf_maps(FixedKHeat(4.0, 0.5), images)[0], maps[2.0], rtol=1e-9, atol=1e-14)


def test_compute_erf_on_a_model_gives_one_map_per_stage() -> None:
    from pdevision.viz.common import create_named_model, model_transform, photo_images

    model = create_named_model("vheat_micro", 32)
    images = photo_images(model_transform(model, 32), 2)[0]
    res = compute_erf(model, images, "vheat_micro")
    assert res.stages == ["stages.0", "stages.1", "stages.2", "stages.3"]
    assert all(m.shape == (32, 32) and m.sum() > 0 for m in res.maps)
    # heat conduction is global: the last stage sees more of the image than the first
    assert res.shares[-1]["area_50"] > res.shares[0]["area_50"]
