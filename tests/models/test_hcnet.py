"""HcNet through timm's model API: sizes, heads, features, options, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

import pdevision  # noqa: F401
from pdevision.bench import count_params
from pdevision.layers import HeatConductionLayer, HeatConductionMixer, RefinementActivation
from pdevision.layers.hcl import GroupNorm1, HcDownsample, HcRaBlock, HcStem, NeighbourMeanHeat
from pdevision.models import list_models
from pdevision.models.hcnet import HcNet, HcNetLibrary, HcNetPaper, PatchStem


@pytest.fixture(scope="module")
def micro() -> HcNet:
    torch.manual_seed(0)
    return timm.create_model("hcnet_micro", num_classes=7).eval()


def _heat_layers(model: torch.nn.Module) -> list[HeatConductionLayer]:
    return [m for m in model.modules() if isinstance(m, HeatConductionLayer)]


def test_registered_in_timm() -> None:
    names = {"hcnet_micro", "hcnet_authors_default", "hcnet_authors_main", "hcnet_tiny", "hcnet_small", "hcnet_base"}
    names |= {"hcnet_library_micro", "hcnet_library_tiny", "hcnet_paper_micro", "hcnet_paper_tiny"}
    assert names <= set(timm.list_models("hcnet_*"))
    assert names <= set(list_models("hcnet_*"))


def test_default_is_the_authors_network(micro: HcNet) -> None:
    assert type(micro) is HcNet and micro.output_fmt == "NCHW"
    assert isinstance(micro.stem, HcStem) and isinstance(micro.norm, GroupNorm1)
    assert all(isinstance(s.downsample, HcDownsample) for s in micro.stages[1:])
    blocks = [b for s in micro.stages for b in s.blocks]
    assert len(blocks) == 6 and all(isinstance(b, HcRaBlock) for b in blocks)
    assert all(b.heat.k_mode == "input" and isinstance(b.mlp.dwconv, torch.nn.Conv2d) for b in blocks)
    assert not _heat_layers(micro)  # no 4-neighbour stencil layers


def _neighbour_mean_numpy(x: np.ndarray) -> np.ndarray:
    """Mean over the (up to 8) neighbours inside the image, by explicit loops (NCHW)."""
    out = np.zeros_like(x)
    _, _, h, w = x.shape
    for i in range(h):
        for j in range(w):
            near = [(a, b) for a in range(i - 1, i + 2) for b in range(j - 1, j + 2) if (a, b) != (i, j)]
            near = [(a, b) for a, b in near if 0 <= a < h and 0 <= b < w]
            out[:, :, i, j] = np.mean([x[:, :, a, b] for a, b in near], axis=0)
    return out


def test_authors_block_is_the_mean_neighbour_step_then_the_ral() -> None:
    """x <- x + alpha (mean_8(x) - x), alpha = sigmoid(W GAP(x)) per sample and channel from the block input, then
    x <- x + RaL(GroupNorm(x)): checked against numpy at an odd, non-square size (the neighbour count follows it)."""
    torch.manual_seed(0)
    block = HcRaBlock(4).double().eval()
    with torch.no_grad():
        torch.nn.init.normal_(block.heat.k_proj.weight)
    x = torch.randn(2, 4, 5, 7, dtype=torch.float64)
    xs = x.numpy()
    wk = block.heat.k_proj.weight.detach().numpy()[:, :, 0, 0]
    alpha = 1 / (1 + np.exp(-(xs.mean(axis=(2, 3)) @ wk.T)))[:, :, None, None]
    heat = xs + alpha * (_neighbour_mean_numpy(xs) - xs)
    with torch.no_grad():
        y = torch.from_numpy(heat)
        m = block.mlp
        ral = m.fc2(m.dwconv(torch.nn.functional.gelu(m.fc1(torch.nn.functional.group_norm(y, 1)))))
        out = block(x)
    np.testing.assert_allclose(out.numpy(), heat + ral.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k_mode", ["input", "learnable", "fixed"])
def test_authors_heat_step_obeys_the_maximum_principle(k_mode: str) -> None:
    """(1 - alpha) x + alpha mean_8(x) with 0 <= alpha <= 1: each output within its 3x3 neighbourhood's range."""
    torch.manual_seed(1)
    heat = NeighbourMeanHeat(3, k_mode=k_mode, k_init=0.9).double()
    if heat.k_proj is not None:
        torch.nn.init.normal_(heat.k_proj.weight, std=3.0)
    x = torch.randn(2, 3, 6, 9, dtype=torch.float64)
    with torch.no_grad():
        y = x + heat(x)
    pad = torch.nn.functional.pad(x, (1, 1, 1, 1), value=float("nan"))
    windows = pad.unfold(2, 3, 1).unfold(3, 3, 1)  # (B, C, H, W, 3, 3), nan outside the image
    hi = torch.nan_to_num(windows, nan=-np.inf).amax(dim=(-2, -1))
    lo = torch.nan_to_num(windows, nan=np.inf).amin(dim=(-2, -1))
    assert torch.all(y <= hi + 1e-12) and torch.all(y >= lo - 1e-12)
    assert (y - x).abs().max() > 0.1  # it did move


@pytest.mark.parametrize(
    "options",
    [dict(k_mode="fixed", k_init=0.1), dict(k_mode="learnable"), dict(ra_filter=False, ra_filter_matched=False)],
)
def test_authors_ablation_options(options: dict) -> None:
    model = timm.create_model("hcnet_micro", num_classes=5, in_chans=1, drop_path_rate=0.2, **options)
    heats = [b.heat for s in model.stages for b in s.blocks]
    if "k_mode" in options:
        assert all(h.k_mode == options["k_mode"] and h.k_proj is None for h in heats)
        alpha = heats[0].rate(torch.zeros(1, 32, 4, 4))
        assert alpha.item() == pytest.approx(options.get("k_init", 0.5))
    if "ra_filter" in options:
        assert all(isinstance(b.mlp.dwconv, torch.nn.Identity) for s in model.stages for b in s.blocks)
        assert model.stages[0].blocks[0].mlp.fc1.out_channels == 128
    assert model.stages[-1].blocks[-1].drop_path.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 1, 64, 48)).shape == (2, 5)


def test_authors_filter_ablation_is_parameter_matched() -> None:
    with_filter = count_params(timm.create_model("hcnet_micro"))
    matched = timm.create_model("hcnet_micro", ra_filter=False)
    plain = count_params(timm.create_model("hcnet_micro", ra_filter=False, ra_filter_matched=False))
    assert abs(count_params(matched) - with_filter) / with_filter < 1e-3
    assert (with_filter - plain) / with_filter > 5e-3


def test_library_options_are_refused_for_the_authors_network() -> None:
    for option in (dict(parametrisation="paper"), dict(steps=2), dict(layer_scale=1e-5), dict(post_norm=True)):
        with pytest.raises(
            TypeError, match=f"HcNet got unexpected keyword argument\\(s\\): \\['{next(iter(option))}'\\]"
        ):
            timm.create_model("hcnet_micro", **option)


def test_the_retired_layout_argument_names_the_variants() -> None:
    """``layout="library"`` / ``"paper"`` were arguments of ``hcnet_*``; the reconstructions are now models."""
    with pytest.raises(TypeError, match="hcnet_library_\\* and hcnet_paper_\\*"):
        timm.create_model("hcnet_micro", layout="library")


@pytest.mark.parametrize(("name", "cls"), [("hcnet_library_micro", HcNetLibrary), ("hcnet_paper_micro", HcNetPaper)])
def test_the_reconstructions_are_variants_of_their_own(name: str, cls: type) -> None:
    model = timm.create_model(name)
    assert type(model) is cls and isinstance(model, HcNet) and model.output_fmt == "NHWC"
    assert not any(isinstance(m, (HcRaBlock, NeighbourMeanHeat, GroupNorm1)) for m in model.modules())


def test_library_defaults_are_the_documented_ones() -> None:
    model = timm.create_model("hcnet_library_micro")
    layers = _heat_layers(model)
    assert len(layers) == 6
    assert all(
        (m.k_mode, m.parametrisation, m.boundary, m.steps) == ("input", "stable", "insulated", 1) for m in layers
    )
    assert all(isinstance(b.mlp.act, RefinementActivation) for s in model.stages for b in s.blocks)


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
def test_library_create_model_options(options: dict) -> None:
    model = timm.create_model("hcnet_library_micro", num_classes=5, in_chans=1, drop_path_rate=0.2, **options)
    heat = _heat_layers(model)[0]
    for key in ("k_mode", "parametrisation", "boundary", "steps"):
        if key in options:
            assert getattr(heat, key) == options[key]
    if "ra_filter" in options:
        assert not any(isinstance(m, RefinementActivation) for m in model.modules())
        assert model.stages[0].blocks[0].mlp.fc1.out_features == 64
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 1, 64, 48)).shape == (2, 5)


@pytest.mark.parametrize("name", ["hcnet_micro", "hcnet_library_micro"])
def test_no_weight_decay_lists_the_step_sizes(name: str) -> None:
    model = timm.create_model(name, k_mode="learnable")
    names = model.no_weight_decay()
    if name == "hcnet_library_micro":
        assert "stages.0.blocks.0.mixer.heat.weight" in names and "stages.3.blocks.0.mixer.heat.k_logit" in names
        assert len(names) == 12
    else:
        assert names == {f"stages.{i}.blocks.{j}.heat.k_logit" for i, n in enumerate((1, 1, 3, 1)) for j in range(n)}
    assert names <= dict(model.named_parameters()).keys()


@pytest.mark.parametrize(
    "options",
    [
        ("hcnet_micro", {}),
        ("hcnet_micro", dict(k_mode="learnable")),
        ("hcnet_library_micro", {}),
        ("hcnet_library_micro", dict(parametrisation="paper")),
        ("hcnet_paper_micro", {}),
    ],
)
def test_gradients_flow_to_all_parameters(options: tuple[str, dict]) -> None:
    model = timm.create_model(options[0], num_classes=4, **options[1])
    model(torch.randn(2, 3, 64, 64)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="one entry per stage"):
        HcNet(dims=[8, 16], depths=(1, 1, 1))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        HcNet(dimz=8)
    with pytest.raises(ValueError, match="k_mode"):
        HcNet(dims=8, depths=(1, 1, 1, 1), k_mode="adaptive")
    with pytest.raises(ValueError, match="k_mode"):
        HcNetLibrary(dims=8, depths=(1, 1, 1, 1), k_mode="adaptive")
    with pytest.raises(TypeError, match=r"HcNetPaper got unexpected keyword argument\(s\): \['post_norm'\]"):
        HcNetPaper(dims=8, depths=(1, 1, 1, 1), post_norm=True)  # the HcL's own residual carries the stream


@pytest.mark.parametrize("name", ["hcnet_library_micro", "hcnet_paper_micro"])
def test_filter_ablation_is_parameter_matched(name: str) -> None:
    """The paper's Table 6 compares the RaL filter at the same parameter count."""
    with_filter = count_params(timm.create_model(name))  # the library's reconstructions
    matched = timm.create_model(name, ra_filter=False)
    plain = count_params(timm.create_model(name, ra_filter=False, ra_filter_matched=False))
    assert not any(isinstance(m, RefinementActivation) for m in matched.modules())
    assert abs(count_params(matched) - with_filter) / with_filter < 1e-3
    assert (with_filter - plain) / with_filter > 5e-3  # what matching compensates


def test_paper_layout_structure() -> None:
    from timm.models.swin_transformer import PatchMerging

    from pdevision.layers.hcl import PaperHcRaBlock

    model = timm.create_model("hcnet_paper_micro", num_classes=3)
    assert isinstance(model.stem, PatchStem) and model.stem.conv.stride == (4, 4)
    assert all(isinstance(s.downsample, PatchMerging) for s in model.stages[1:])
    assert all(isinstance(b, PaperHcRaBlock) for s in model.stages for b in s.blocks)
    assert not any(isinstance(m, HeatConductionMixer) for m in model.modules())  # no projections around the HcL
    for size in ((64, 64), (45, 61)):
        assert model(torch.randn(2, 3, *size)).shape == (2, 3)


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


def test_a_one_pixel_map_has_no_heat_flow() -> None:
    """The authors' division by the neighbour count is 0 / 0 on a 1x1 map (a 32 px input's last stage): here the
    pixel keeps its value, and the model's output stays finite."""
    heat = NeighbourMeanHeat(4)
    x = torch.randn(2, 4, 1, 1)
    assert torch.equal(heat(x), torch.zeros_like(x))
    line = torch.randn(1, 4, 1, 3)  # one row: 1 or 2 neighbours, still the mean of those
    mean = torch.stack([line[..., 1], (line[..., 0] + line[..., 2]) / 2, line[..., 1]], dim=-1)
    torch.testing.assert_close(heat(line), heat.rate(line) * (mean - line))
    model = timm.create_model("hcnet_micro", num_classes=3).eval()
    assert torch.isfinite(model(torch.randn(1, 3, 32, 32))).all()


@pytest.mark.parametrize(("name", "params"), [("hcnet_library_tiny", 28.27e6), ("hcnet_paper_tiny", 21.97e6)])
def test_the_reconstructions_tiny_sizes_are_the_documented_ones(name: str, params: float) -> None:
    """hcnet_library_tiny is the library's former hcnet_tiny (28.27M, near the paper's 28M); hcnet_paper_tiny has
    no projections around the HcL (21.97M) at the same Swin-T layout."""
    model = timm.create_model(name)
    assert (model.dims, model.depths) == ([96, 192, 384, 768], [2, 2, 6, 2])
    assert count_params(model) == pytest.approx(params, abs=0.005e6)
