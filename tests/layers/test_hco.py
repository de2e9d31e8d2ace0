"""The Heat Conduction Operator composed from its parts, with scipy's DCT as the reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch
import torch.nn.functional as F

from pdevision.layers import HeatConductionOperator
from pdevision.ops import frequency_energy
from pdevision.ops.dct import dct2, idct2


def _reference_hco(op: HeatConductionOperator, x: torch.Tensor, fve: torch.Tensor) -> np.ndarray:
    """HCO in float64 with the heat step done by scipy: dwconv, linear, heat, LN, SiLU gate, linear."""
    xd = x.double()
    p = {k: v.double() for k, v in op.state_dict().items() if v is not None}
    y = F.conv2d(xd.permute(0, 3, 1, 2), p["dwconv.weight"], p["dwconv.bias"], padding=1, groups=op.dim)
    y = y.permute(0, 2, 3, 1) @ p["linear.weight"].T + p["linear.bias"]
    u, gate = y.chunk(2, dim=-1)
    k = torch.relu(fve.double() @ p["to_k.0.weight"].T + p["to_k.0.bias"]).numpy()  # (H, W, C)
    h, w = u.shape[1:3]
    energy = (np.arange(h)[:, None] * np.pi / h) ** 2 + (np.arange(w)[None, :] * np.pi / w) ** 2
    coeff = scipy.fft.dctn(u.numpy(), type=2, norm="ortho", axes=(1, 2))
    heat = scipy.fft.idctn(coeff * np.exp(-k * energy[..., None]), type=2, norm="ortho", axes=(1, 2))
    ut = F.layer_norm(torch.from_numpy(heat), (op.dim,), p["out_norm.weight"], p["out_norm.bias"])
    out = (ut * F.silu(gate)) @ p["out_linear.weight"].T + p["out_linear.bias"]
    return out.numpy()


def _randomise(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.ndim == 1 and p.shape[0] > 0 else 0.0) * 0.1)


def test_hco_matches_scipy_reference_both_methods() -> None:
    for method in ("matrix", "fft"):
        op = HeatConductionOperator(6, dct_method=method)
        _randomise(op)
        x = torch.randn(2, 7, 9, 6)
        fve = torch.randn(7, 9, 6)
        np.testing.assert_allclose(op(x, fve).detach().numpy(), _reference_hco(op, x, fve), atol=1e-5)


def test_constant_diffusivity_gives_heat_equation_step() -> None:
    """to_k = ReLU(0 * fve + kappa) makes the conduction branch the exact heat solution with k t = kappa."""
    op = HeatConductionOperator(4)
    with torch.no_grad():
        op.to_k[0].weight.zero_()
        op.to_k[0].bias.fill_(0.8)
    decay = op.decay(5, 6, torch.randn(5, 6, 4))
    expected = torch.exp(-0.8 * frequency_energy(5, 6, dtype=torch.float32))[..., None].expand(5, 6, 4)
    torch.testing.assert_close(decay, expected)


def test_fold_gives_same_output_and_skips_projection() -> None:
    op = HeatConductionOperator(8)
    _randomise(op)
    x, fve = torch.randn(1, 6, 6, 8), torch.randn(6, 6, 8)
    ref = op(x, fve)
    op.fold(fve)
    assert op.k_exp is not None and op.k_exp.shape == (6, 6, 8)
    torch.testing.assert_close(op(x, None), ref, rtol=1e-5, atol=1e-6)
    assert "k_exp" in op.state_dict()
    op.unfold()
    assert op.k_exp is None and "k_exp" not in op.state_dict()


def test_gradients_reach_every_parameter_and_the_fve() -> None:
    op = HeatConductionOperator(5)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    fve = torch.randn(4, 5, 5, requires_grad=True)
    with torch.no_grad():
        op.to_k[0].bias.fill_(0.5)  # keep the ReLU open so the gradient reaches the projection
    op(x, fve).square().sum().backward()
    for name, p in op.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert fve.grad is not None and fve.grad.abs().sum() > 0
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("k_mode", ["learnable", "fixed"])
def test_scalar_k_modes_conduct_with_one_k(k_mode: str) -> None:
    """``k_mode="learnable"``/``"fixed"``: one k for the layer, so the conducted branch is the heat solution with
    that scalar k (checked against scipy's DCT), and only the learnable k gets a gradient."""
    torch.manual_seed(0)
    op = HeatConductionOperator(4, k_mode=k_mode, k_init=0.7).double()
    assert op.to_k is None
    k = op.diffusivity(torch.zeros(5, 6, 4, dtype=torch.float64))
    assert k.shape == (5, 6, 4)
    np.testing.assert_allclose(k.detach().numpy(), 0.7)
    u = torch.randn(2, 5, 6, 4, dtype=torch.float64)
    energy = (np.arange(5)[:, None] * np.pi / 5) ** 2 + (np.arange(6)[None, :] * np.pi / 6) ** 2
    spec = scipy.fft.dctn(u.numpy(), axes=(1, 2), norm="ortho") * np.exp(-0.7 * energy)[None, :, :, None]
    expected = scipy.fft.idctn(spec, axes=(1, 2), norm="ortho")
    decay = op.decay(5, 6, torch.zeros(5, 6, 4, dtype=torch.float64))
    got = idct2(dct2(u, dims=(1, 2)) * decay, dims=(1, 2))
    np.testing.assert_allclose(got.detach().numpy(), expected, atol=1e-10)
    out = op(torch.randn(1, 5, 6, 4, dtype=torch.float64), torch.zeros(5, 6, 4, dtype=torch.float64))
    out.sum().backward()
    if k_mode == "learnable":
        assert op.k_param.grad is not None and op.k_param.grad.abs() > 0
    else:
        assert not any(p.grad is None for p in op.parameters())  # every parameter it has is used
    with pytest.raises(ValueError, match="k_mode"):
        HeatConductionOperator(4, k_mode="nope")


def test_vheat_k_mode_builds_and_trains() -> None:
    import timm

    for mode in ("learnable", "fixed"):
        model = timm.create_model("vheat_micro", num_classes=3, img_size=32, k_mode=mode)
        model(torch.randn(2, 3, 40, 36)).sum().backward()
        assert all(s.freq_embed.grad is None for s in model.stages)
