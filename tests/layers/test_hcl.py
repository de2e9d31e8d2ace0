"""HcNet's Heat Conduction Layer and Refinement Approximation Layer against numpy / functional references."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from pdevision.layers import (
    HeatConductionLayer,
    HeatConductionMixer,
    MixerBlock,
    RefinementActivation,
    refinement_act_layer,
)
from pdevision.ops import fdm_heat_step


def _np_step(z: np.ndarray, w: np.ndarray, k: np.ndarray, boundary: str = "insulated") -> np.ndarray:
    """``z + k (w1 z[i+1,j] + w2 z[i-1,j] + w3 z[i,j+1] + w4 z[i,j-1] - W z)``; z (B,C,H,W), w (C,4), k (B,C)."""
    p = np.pad(z, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge" if boundary == "insulated" else "constant")
    nb = (p[:, :, 2:, 1:-1], p[:, :, :-2, 1:-1], p[:, :, 1:-1, 2:], p[:, :, 1:-1, :-2])
    lap = sum(w[None, :, i, None, None] * (nb[i] - z) for i in range(4))
    return z + k[:, :, None, None] * lap


def _stencil_inputs(z: np.ndarray, boundary: str) -> np.ndarray:
    """The five values each output pixel's stencil reads (ghost cells included): (5, B, C, H, W)."""
    p = np.pad(z, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge" if boundary == "insulated" else "constant")
    return np.stack([z, p[:, :, 2:, 1:-1], p[:, :, :-2, 1:-1], p[:, :, 1:-1, 2:], p[:, :, 1:-1, :-2]])


def _randomise(layer: HeatConductionLayer, scale: float = 1.0) -> None:
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * scale)


# -- the heat step ----------------------------------------------------------------------------------


@pytest.mark.parametrize("boundary", ["insulated", "zeros"])
def test_paper_layer_matches_numpy_per_sample_k(boundary: str) -> None:
    layer = HeatConductionLayer(5, k_mode="input", parametrisation="paper", boundary=boundary).double()
    _randomise(layer)
    z = torch.randn(3, 5, 7, 6, dtype=torch.float64)
    w = layer.weight.detach().numpy()
    gap = z.mean(dim=(2, 3)).numpy()
    k = 1 / (1 + np.exp(-(gap @ layer.k_proj.weight.detach().numpy().T + layer.k_proj.bias.detach().numpy())))
    assert k.std(axis=0).min() > 0  # k differs between samples
    with torch.no_grad():
        np.testing.assert_allclose(layer(z).numpy(), _np_step(z.numpy(), w, k, boundary), rtol=1e-12, atol=1e-12)


def test_stable_layer_matches_numpy_with_its_formula() -> None:
    layer = HeatConductionLayer(4, k_mode="learnable", k_init=0.8, parametrisation="stable").double()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(4, 4) * 2)
    z = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    w = np.log1p(np.exp(layer.weight.detach().numpy()))  # softplus
    k0 = 1 / (1 + math.exp(-layer.k_logit.item()))  # sigmoid, 0.8 up to float32 rounding of the logit
    assert k0 == pytest.approx(0.8)
    k = k0 / np.maximum(w.sum(1), 1.0)
    with torch.no_grad():
        np.testing.assert_allclose(
            layer(z).numpy(), _np_step(z.numpy(), w, np.broadcast_to(k, (2, 4))), rtol=1e-12, atol=1e-12
        )


def test_paper_and_stable_start_as_the_same_function() -> None:
    paper = HeatConductionLayer(6, parametrisation="paper")
    stable = HeatConductionLayer(6, parametrisation="stable")
    stable.k_proj.load_state_dict(paper.k_proj.state_dict())
    torch.testing.assert_close(stable.coefficients(torch.zeros(1, 6, 2, 2))[0], torch.full((6, 4), 0.25))
    z = torch.randn(2, 6, 9, 9)
    torch.testing.assert_close(stable(z), paper(z))


@pytest.mark.parametrize(
    ("k_mode", "params"), [("fixed", {"weight"}), ("learnable", {"weight", "k_logit"}), ("input", None)]
)
def test_k_modes(k_mode: str, params: set[str] | None) -> None:
    layer = HeatConductionLayer(8, k_mode=k_mode, k_init=0.3 if k_mode != "input" else 0.5)  # type: ignore[arg-type]
    names = {n for n, _ in layer.named_parameters()}
    z = torch.randn(4, 8, 5, 5)
    k = layer.rate(z)
    if k_mode == "input":
        assert names == {"weight", "k_proj.weight", "k_proj.bias"}
        assert k.shape == (4, 8, 1, 1) and ((k > 0) & (k < 1)).all()
    else:
        assert names == params
        assert k.ndim == 0
        assert k.item() == pytest.approx(0.3)


def test_fixed_k_default_and_learnable_k_trains() -> None:
    assert HeatConductionLayer(2, k_mode="fixed").rate(torch.zeros(1, 2, 2, 2)).item() == 0.5
    layer = HeatConductionLayer(2, k_mode="learnable", k_init=0.2)
    z = torch.zeros(1, 2, 4, 4)
    z[0, :, 1, 1] = 1.0
    layer(z).pow(2).sum().backward()
    assert layer.k_logit.grad is not None and layer.k_logit.grad.abs() > 0


def test_insulated_layer_conserves_sum_for_axis_symmetric_weights() -> None:
    for parametrisation in ("paper", "stable"):
        layer = HeatConductionLayer(4, parametrisation=parametrisation, steps=2)  # type: ignore[arg-type]
        _randomise(layer)
        with torch.no_grad():  # w1 = w2, w3 = w4 per channel, different between the axes
            layer.weight.copy_(torch.randn(4, 2).repeat_interleave(2, dim=1))
        z = torch.randn(3, 4, 7, 10, dtype=torch.float64)
        out = layer.double()(z)
        torch.testing.assert_close(out.sum(dim=(2, 3)), z.sum(dim=(2, 3)), rtol=1e-12, atol=1e-10)
        assert (out - z).abs().max() > 1e-3


def test_zero_boundary_option() -> None:
    layer = HeatConductionLayer(3, k_mode="fixed", k_init=0.25, parametrisation="paper", boundary="zeros")
    z = torch.ones(1, 3, 4, 4)
    out = layer(z)
    assert out.sum() < z.sum()  # heat leaves through the walls
    torch.testing.assert_close(out[..., 1:-1, 1:-1], z[..., 1:-1, 1:-1])  # no gradient inside
    torch.testing.assert_close(out[0, 0, 0, 0], torch.tensor(1 - 0.25 * 0.5))  # two missing neighbours
    assert HeatConductionLayer(3)(z).sum().item() == pytest.approx(z.sum().item())  # insulated default


def test_layer_steps_equal_repeated_single_steps() -> None:
    single = HeatConductionLayer(5, k_mode="learnable", k_init=0.4, parametrisation="paper")
    _randomise(single, 0.5)
    triple = HeatConductionLayer(5, k_mode="learnable", k_init=0.4, parametrisation="paper", steps=3)
    triple.load_state_dict(single.state_dict())
    z = torch.randn(2, 5, 8, 9)
    torch.testing.assert_close(triple(z), single(single(single(z))))
    # input mode: k comes once from the layer input, then three steps with it
    inp = HeatConductionLayer(5, steps=3)
    _randomise(inp)
    w, k = inp.coefficients(z)
    once = z
    for _ in range(3):
        once = fdm_heat_step(once, w, k)
    torch.testing.assert_close(inp(z), once)


# -- the discrete maximum principle ----------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_stable_maximum_principle_property(data: st.DataObject) -> None:
    """Stable mode: each output lies in [min, max] of its stencil inputs, for random inputs and parameters."""
    b, c, h, w = (data.draw(st.integers(1, n)) for n in (2, 4, 7, 7))
    boundary = data.draw(st.sampled_from(["insulated", "zeros"]))
    k_mode = data.draw(st.sampled_from(["fixed", "learnable", "input"]))
    k_init = data.draw(st.floats(0.0, 1.0) if k_mode == "fixed" else st.floats(1e-3, 1 - 1e-3))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float32]))
    z = data.draw(arrays(np.float64, (b, c, h, w), elements=st.floats(-1e3, 1e3)))
    raw = data.draw(arrays(np.float64, (c, 4), elements=st.floats(-10, 10)))
    layer = HeatConductionLayer(c, k_mode=k_mode, k_init=k_init, parametrisation="stable", boundary=boundary)
    layer = layer.to(dtype)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(raw))
        if layer.k_proj is not None:
            layer.k_proj.weight.copy_(torch.randn(c, c, generator=gen) * 5)
            layer.k_proj.bias.copy_(torch.randn(c, generator=gen) * 5)
        if layer.k_logit is not None:
            layer.k_logit.copy_(torch.randn((), generator=gen) * 5)
        out = layer(torch.from_numpy(z).to(dtype)).double().numpy()
    zd = torch.from_numpy(z).to(dtype).double().numpy()
    inputs = _stencil_inputs(zd, boundary)
    tol = (1e-12 if dtype == torch.float64 else 1e-5) * (1 + np.abs(zd).max())
    assert (out >= inputs.min(0) - tol).all()
    assert (out <= inputs.max(0) + tol).all()


def test_stable_multi_step_stays_in_global_range() -> None:
    layer = HeatConductionLayer(6, parametrisation="stable", steps=5)
    _randomise(layer, 4.0)
    z = torch.rand(2, 6, 9, 7) * 10 - 3
    out = layer(z)
    assert out.min() >= z.min() - 1e-5 and out.max() <= z.max() + 1e-5


def test_paper_mode_can_break_the_maximum_principle() -> None:
    layer = HeatConductionLayer(1, k_mode="fixed", k_init=0.5, parametrisation="paper", w_init=1.0)  # k W = 2
    z = (torch.arange(8)[:, None] + torch.arange(8)[None, :]).remainder(2).float()[None, None]  # checkerboard
    assert layer(z).max() > 1.5
    stable = HeatConductionLayer(1, k_mode="fixed", k_init=0.5, parametrisation="stable", w_init=1.0)
    out = stable(z)
    assert out.min() >= 0 and out.max() <= 1


# -- the mixer and the refinement approximation layer ----------------------------------------------


def test_mixer_is_projection_heat_projection_nhwc() -> None:
    mixer = HeatConductionMixer(6, k_mode="learnable", boundary="zeros", steps=2)
    assert mixer.heat.steps == 2 and mixer.heat.boundary == "zeros"
    x = torch.randn(2, 5, 7, 6)
    z = F.linear(x, mixer.proj_in.weight, mixer.proj_in.bias).permute(0, 3, 1, 2)
    ref = F.linear(mixer.heat(z).permute(0, 2, 3, 1), mixer.proj_out.weight, mixer.proj_out.bias)
    torch.testing.assert_close(mixer(x), ref)


def _ra_block(dim: int, ratio: float, filter: bool) -> MixerBlock:
    return MixerBlock(
        dim, HeatConductionMixer(dim), mlp_ratio=ratio, act_layer=refinement_act_layer(dim, ratio, filter)
    )


@pytest.mark.parametrize("ratio", [4.0, 2.5])
def test_refinement_layer_matches_functional_reference(ratio: float) -> None:
    dim = 6
    block = _ra_block(dim, ratio, True)
    hidden = int(dim * ratio)
    mlp = block.mlp
    assert isinstance(mlp.act, RefinementActivation) and mlp.fc1.out_features == hidden
    z = torch.randn(2, 5, 4, dim)  # NHWC
    h = F.gelu(F.linear(z, mlp.fc1.weight, mlp.fc1.bias)).permute(0, 3, 1, 2)
    h = F.conv2d(h, mlp.act.dwconv.weight, mlp.act.dwconv.bias, padding=1, groups=hidden).permute(0, 2, 3, 1)
    ref = z + F.linear(h, mlp.fc2.weight, mlp.fc2.bias)  # z + Linear_beta(tau(Linear(z)))
    torch.testing.assert_close(z + mlp(z), ref)


def test_filter_false_removes_the_depthwise_conv() -> None:
    with_filter, without = _ra_block(8, 4.0, True), _ra_block(8, 4.0, False)
    assert isinstance(without.mlp.act, torch.nn.GELU)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in without.mlp.modules())
    n = sum(p.numel() for p in with_filter.parameters()) - sum(p.numel() for p in without.parameters())
    assert n == 32 * 9 + 32  # one depthwise 3x3 filter with bias on the 32 hidden channels
    x = torch.randn(1, 4, 4, 8)
    torch.testing.assert_close(without.mlp(x), without.mlp.fc2(F.gelu(without.mlp.fc1(x))))


def test_gradients_reach_w_k_projection_and_refinement() -> None:
    block = _ra_block(8, 4.0, True)
    with torch.no_grad():
        block.mixer.heat.weight.add_(torch.randn(8, 4) * 0.3)  # break the isotropic start
    x = torch.randn(2, 6, 5, 8)
    block(x).pow(2).sum().backward()
    named = dict(block.named_parameters())
    for name in (
        "mixer.heat.weight",
        "mixer.heat.k_proj.weight",
        "mixer.heat.k_proj.bias",
        "mlp.fc1.weight",
        "mlp.act.dwconv.weight",
        "mlp.fc2.weight",
    ):
        grad = named[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k_mode"):
        HeatConductionLayer(4, k_mode="adaptive")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parametrisation"):
        HeatConductionLayer(4, parametrisation="clamped")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="boundary"):
        HeatConductionLayer(4, boundary="periodic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps"):
        HeatConductionLayer(4, steps=0)
    with pytest.raises(ValueError, match="0 <= k <= 1"):
        HeatConductionLayer(4, k_mode="fixed", k_init=1.5, parametrisation="stable")
    with pytest.raises(ValueError, match="sigmoid"):
        HeatConductionLayer(4, k_mode="learnable", k_init=1.0)
    assert HeatConductionLayer(4, k_mode="fixed", k_init=1.5, parametrisation="paper").k_init == 1.5
    assert math.isclose(
        torch.sigmoid(HeatConductionLayer(2, k_mode="learnable", k_init=0.3).k_logit).item(), 0.3, rel_tol=1e-6
    )
