"""Restoration networks: any size, grey and colour, gradients, equal-parameter sizing, their own registry."""

from __future__ import annotations

import pytest
import timm
import torch

from pdevision.models.restoration import (
    ARCHITECTURES,
    DnCNN,
    SwinIRStyle,
    VHeatIR,
    count_trainable_params,
    create_restoration_model,
    list_restoration_models,
    match_params,
)
from pdevision.models.vheat import VHeatStage


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("in_chans", [1, 3])
def test_any_size_forward_keeps_shape_and_gradients_flow(arch: str, in_chans: int) -> None:
    small = {"dncnn": dict(width=8, depth=4), "swinir": dict(embed_dim=8, depths=(1, 2), num_heads=2, window_size=4)}
    model = create_restoration_model(
        f"{arch}_micro", in_chans, model_args=small.get(arch, dict(embed_dim=8, img_size=16))
    )
    for h, w in [(16, 16), (13, 21), (7, 30)]:
        x = torch.rand(2, in_chans, h, w)
        y = model(x)
        assert y.shape == x.shape
        assert torch.isfinite(y).all()
    last = model.body[-1] if arch == "dncnn" else model.conv_last
    torch.nn.init.normal_(last.weight, std=0.1)  # zero-initialised: give the deeper layers a gradient
    model(x).square().mean().backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not no_grad


def test_vheatir_is_swinir_layout_of_vheat_stages_with_resampled_fve() -> None:
    model = create_restoration_model("vheatir_micro", 1)
    assert isinstance(model, VHeatIR)
    assert len(model.groups) == 2 and all(isinstance(g.body, VHeatStage) for g in model.groups)
    stage = model.groups[0].body
    assert stage.freq_embed.shape == (48, 48, 32)
    # at the training size the FVE is used as is; at another size it is resampled to that size
    assert torch.equal(stage.fve((48, 48)), stage.freq_embed)
    assert stage.fve((37, 53)).shape == (37, 53, 32)
    # global residual and a zero-initialised reconstruction conv: the untrained network is the identity
    x = torch.rand(1, 1, 33, 41)
    assert torch.equal(model(x), x)


def test_swinir_style_uses_timm_swin_blocks_and_pads_to_window() -> None:
    model = create_restoration_model("swinir_micro", 3)
    assert isinstance(model, SwinIRStyle)
    block = model.groups[0].body.blocks[1]
    assert isinstance(block, timm.models.swin_transformer.SwinTransformerBlock)
    assert block.shift_size == (4, 4)
    assert model.pad_multiple == 8
    model.eval()
    x = torch.rand(1, 3, 19, 27)  # not a multiple of the window
    with torch.no_grad():
        assert model(x).shape == x.shape


def test_dncnn_predicts_the_residual() -> None:
    model = DnCNN(in_chans=1, width=8, depth=4)
    x = torch.rand(1, 1, 15, 16)
    assert torch.equal(model(x), x)  # zero-initialised last conv: the identity before training
    torch.nn.init.normal_(model.body[-1].weight)
    assert torch.allclose(model(x), x - model.body(x))


def test_match_params_sizes_baselines_to_vheatir() -> None:
    target = count_trainable_params(create_restoration_model("vheatir_micro", 1))
    for arch in ("dncnn", "swinir"):
        cfg = match_params(f"{arch}_micro", target, 1)
        model = create_restoration_model(f"{arch}_micro", 1, match_to=target)
        assert abs(count_trainable_params(model) - target) / target < 0.1, (arch, cfg)
        if arch == "swinir":
            assert cfg["embed_dim"] % cfg["num_heads"] == 0


def test_paper_sized_configs() -> None:
    with torch.device("meta"):
        v = create_restoration_model("vheatir_base", 3)
        s = create_restoration_model("swinir_base", 3)
        d = create_restoration_model("dncnn_base", 1)
    assert v.embed_dim == s.embed_dim == 180 and v.depths == s.depths == (6,) * 6
    assert d.depth == 17 and d.width == 64
    assert (
        count_trainable_params(v) > count_trainable_params(s) > count_trainable_params(d)
    )  # the FVEs at 128 px dominate vHeatIR's count


def test_restoration_registry_builds_the_models_and_timms_does_not_list_them() -> None:
    """Image-to-image nets have no classifier contract (num_classes, forward_head): they are in this library's
    registry, which the restoration tasks and checkpoints build from, not in timm's (whose model tests they failed)."""
    names = list_restoration_models()
    assert names == sorted(f"{a}_{s}" for a in ARCHITECTURES for s in ("base", "micro"))
    assert list_restoration_models("vheatir_*") == ["vheatir_base", "vheatir_micro"]
    for name in ("vheatir_micro", "swinir_micro", "dncnn_micro"):
        model = create_restoration_model(name, 1, 24, {})
        assert model(torch.rand(1, 1, 24, 24)).shape == (1, 1, 24, 24)
    assert not any(timm.is_model(n) for n in names)
    assert not timm.list_models(["vheatir_*", "swinir_*", "dncnn_*"])
    with pytest.raises(TypeError):
        VHeatIR(bogus=1)
    with pytest.raises(TypeError, match="num_classes"):  # no classifier to size
        VHeatIR(num_classes=10)
    with pytest.raises(ValueError, match="'vheat_micro' is not a restoration model; choose one of dncnn_base"):
        create_restoration_model("vheat_micro", 1, 24, {})


def test_building_a_restoration_net_as_a_backbone_names_the_restoration_path() -> None:
    from pdevision.models.factory import ModelNameError, create_model

    with pytest.raises(ModelNameError, match=r"'vheatir_micro' is a restoration model .*--task denoise"):
        create_model("vheatir_micro")


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_images_smaller_than_the_window_or_padding_run(arch: str) -> None:
    """SwinIR-style pads to its window by reflection, which cannot pad a side shorter than the pad: such
    sides are replicated instead. Every net restores images down to 1x1."""
    small = {"dncnn": dict(width=8, depth=3), "swinir": dict(embed_dim=8, depths=(1,), num_heads=2)}
    model = create_restoration_model(
        f"{arch}_micro", 1, model_args=small.get(arch, dict(embed_dim=8, depths=(1,)))
    ).eval()
    with torch.no_grad():
        for h, w in [(1, 1), (1, 5), (3, 9), (9, 2)]:
            x = torch.rand(1, 1, h, w)
            y = model(x)
            assert y.shape == x.shape and torch.isfinite(y).all()
    if arch == "swinir":  # reflection where it fits: a 7-wide side padded by 1 to the window of 8
        from pdevision.models.restoration import _pad_to_multiple

        x = torch.arange(7.0).view(1, 1, 1, 7).expand(1, 1, 3, 7)
        padded = _pad_to_multiple(x, 8)
        assert padded.shape == (1, 1, 8, 8)
        assert padded[0, 0, 0, 7] == 5.0  # reflected (index 5 mirrors across 6)
        assert torch.equal(padded[0, 0, 3:, :], padded[0, 0, 2:3, :].expand(5, 8))  # 3 rows: replicated
