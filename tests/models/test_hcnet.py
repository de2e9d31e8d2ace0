"""HcNet through timm's model API: sizes, heads, features, options, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

import pdevision  # noqa: F401
from pdevision.bench import count_macs, count_params
from pdevision.layers import HeatConductionLayer, HeatConductionMixer, RefinementActivation
from pdevision.models import list_models
from pdevision.models.hcnet import HcNet


@pytest.fixture(scope="module")
def micro() -> HcNet:
    torch.manual_seed(0)
    return timm.create_model("hcnet_micro", num_classes=7).eval()


def _heat_layers(model: torch.nn.Module) -> list[HeatConductionLayer]:
    return [m for m in model.modules() if isinstance(m, HeatConductionLayer)]


def test_registered_in_timm() -> None:
    names = {"hcnet_micro", "hcnet_tiny", "hcnet_small", "hcnet_base"}
    assert names <= set(timm.list_models("hcnet_*"))
    assert names <= set(list_models("hcnet_*"))


def test_tiny_matches_the_paper_budget() -> None:
    model = timm.create_model("hcnet_tiny")
    assert model.dims == [96, 192, 384, 768] and model.depths == [2, 2, 6, 2]
    params, macs = count_params(model), count_macs(model, 224)
    assert abs(params / 28e6 - 1) < 0.10, params  # paper: 28M
    assert abs(macs / 4.1e9 - 1) < 0.10, macs  # paper: 4.1 GMACs
    block = model.stages[2].blocks[-1]
    assert isinstance(block.ls1, torch.nn.Identity) and not block.post_norm
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(0.1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "dims", "layer_scale", "drop_path", "params_m"),
    [("hcnet_small", 96, 1e-5, 0.3, 48.0), ("hcnet_base", 128, 1e-5, 0.5, 84.8)],
)
def test_small_and_base_configurations(
    name: str, dims: int, layer_scale: float, drop_path: float, params_m: float
) -> None:
    model = timm.create_model(name)
    assert model.depths == [2, 2, 18, 2] and model.dims[0] == dims
    block = model.stages[2].blocks[-1]
    assert torch.allclose(block.ls1.gamma, torch.full_like(block.ls1.gamma, layer_scale))
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(drop_path)
    assert count_params(model) / 1e6 == pytest.approx(params_m, abs=0.05)


def test_defaults_are_the_documented_ones(micro: HcNet) -> None:
    layers = _heat_layers(micro)
    assert len(layers) == 6
    assert all(
        (m.k_mode, m.parametrisation, m.boundary, m.steps) == ("input", "stable", "insulated", 1) for m in layers
    )
    assert all(isinstance(b.mlp.act, RefinementActivation) for s in micro.stages for b in s.blocks)


@pytest.mark.parametrize(
    "options",
    [
        dict(k_mode="fixed", k_init=0.1),
        dict(k_mode="learnable"),
        dict(parametrisation="paper"),
        dict(boundary="zeros", steps=2),
        dict(ra_filter=False, ra_filter_matched=False, mlp_ratio=2.0),
    ],
)
def test_create_model_options(options: dict) -> None:
    model = timm.create_model("hcnet_micro", num_classes=5, in_chans=1, drop_path_rate=0.2, **options)
    heat = _heat_layers(model)[0]
    for key in ("k_mode", "parametrisation", "boundary", "steps"):
        if key in options:
            assert getattr(heat, key) == options[key]
    if "ra_filter" in options:
        assert not any(isinstance(m, RefinementActivation) for m in model.modules())
        assert model.stages[0].blocks[0].mlp.fc1.out_features == 64
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 1, 64, 48)).shape == (2, 5)


def test_no_weight_decay_lists_the_stencils() -> None:
    model = timm.create_model("hcnet_micro", k_mode="learnable")
    names = model.no_weight_decay()
    assert "stages.0.blocks.0.mixer.heat.weight" in names and "stages.3.blocks.0.mixer.heat.k_logit" in names
    assert len(names) == 12 and names <= dict(model.named_parameters()).keys()


@pytest.mark.parametrize("parametrisation", ["stable", "paper"])
def test_gradients_flow_to_all_parameters(parametrisation: str) -> None:
    model = timm.create_model("hcnet_micro", num_classes=4, parametrisation=parametrisation)
    model(torch.randn(2, 3, 64, 64)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="one entry per stage"):
        HcNet(dims=[8, 16], depths=(1, 1, 1))
    with pytest.raises(TypeError, match="unexpected arguments"):
        HcNet(dimz=8)
    with pytest.raises(ValueError, match="k_mode"):
        HcNet(dims=8, depths=(1, 1, 1, 1), k_mode="adaptive")


@pytest.mark.parametrize(("name", "layout"), [("hcnet_micro", "library"), ("hcnet_micro", "paper")])
def test_filter_ablation_is_parameter_matched(name: str, layout: str) -> None:
    """The paper's Table 6 compares the RaL filter at the same parameter count."""
    with_filter = count_params(timm.create_model(name, layout=layout))
    matched = timm.create_model(name, layout=layout, ra_filter=False)
    plain = count_params(timm.create_model(name, layout=layout, ra_filter=False, ra_filter_matched=False))
    assert not any(isinstance(m, RefinementActivation) for m in matched.modules())
    assert abs(count_params(matched) - with_filter) / with_filter < 1e-3
    assert (with_filter - plain) / with_filter > 5e-3  # what matching compensates


def test_paper_layout_structure() -> None:
    from timm.models.swin_transformer import PatchMerging

    from pdevision.layers.hcl import PaperHcRaBlock
    from pdevision.models.hcnet import PatchStem

    model = timm.create_model("hcnet_micro", layout="paper", num_classes=3)
    assert isinstance(model.stem, PatchStem) and model.stem.conv.stride == (4, 4)
    assert all(isinstance(s.downsample, PatchMerging) for s in model.stages[1:])
    assert all(isinstance(b, PaperHcRaBlock) for s in model.stages for b in s.blocks)
    assert not any(isinstance(m, HeatConductionMixer) for m in model.modules())  # no projections around the HcL
    for size in ((64, 64), (45, 61)):
        assert model(torch.randn(2, 3, *size)).shape == (2, 3)
    with pytest.raises(ValueError, match="layout must be one of"):
        timm.create_model("hcnet_micro", layout="swin")


def test_paper_block_is_the_heat_step_on_its_input_then_the_ral() -> None:
    """x <- x + k (N(x) - W x), k = sigmoid(Linear(GAP(x))) from the block input, then x <- x + RaL(LN(x)):
    checked against numpy with the RaL's output layer zeroed (then the block is the heat step alone)."""
    from pdevision.layers.hcl import PaperHcRaBlock

    torch.manual_seed(0)
    block = PaperHcRaBlock(4, parametrisation="paper").double().eval()
    with torch.no_grad():
        block.heat.weight.copy_(torch.rand(4, 4, dtype=torch.float64) * 0.3)
        torch.nn.init.normal_(block.heat.k_proj.weight)
        block.mlp.fc2.weight.zero_()
        block.mlp.fc2.bias.zero_()
    x = torch.randn(2, 5, 6, 4, dtype=torch.float64)  # NHWC
    with torch.no_grad():
        out = block(x).numpy()
    xs = x.numpy()
    wk, bk = block.heat.k_proj.weight.detach().numpy(), block.heat.k_proj.bias.detach().numpy()
    k = 1 / (1 + np.exp(-(xs.mean(axis=(1, 2)) @ wk.T + bk)))  # (B, C), from the block input
    w = block.heat.weight.detach().numpy()
    p = np.pad(xs, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    neigh = w[:, 0] * p[:, 2:, 1:-1] + w[:, 1] * p[:, :-2, 1:-1] + w[:, 2] * p[:, 1:-1, 2:] + w[:, 3] * p[:, 1:-1, :-2]
    ref = xs + k[:, None, None, :] * (neigh - w.sum(1) * xs)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)
