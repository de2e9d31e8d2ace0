"""vHeat through timm's model API: sizes, heads, features, folding, loading, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch
from timm.utils.model import reparameterize_model

import pdevision  # noqa: F401
from pdevision.models import VHeat


@pytest.fixture(scope="module")
def micro() -> VHeat:
    torch.manual_seed(0)
    return timm.create_model("vheat_micro", num_classes=7).eval()


def test_registered_in_timm() -> None:
    names = timm.list_models("vheat_*")
    assert {"vheat_micro", "vheat_tiny", "vheat_small", "vheat_base"} <= set(names)


@pytest.mark.parametrize(
    ("name", "post_norm", "layer_scale", "drop_path"),
    [("vheat_tiny", False, None, 0.1), ("vheat_small", True, 1e-5, 0.3), ("vheat_base", True, 1e-5, 0.5)],
)
def test_paper_configurations(name: str, post_norm: bool, layer_scale: float | None, drop_path: float) -> None:
    model = timm.create_model(name)
    block = model.stages[2].blocks[-1]
    assert block.post_norm is post_norm
    if layer_scale is None:
        assert isinstance(block.ls1, torch.nn.Identity)
    else:
        assert torch.allclose(block.ls1.gamma, torch.full_like(block.ls1.gamma, layer_scale))
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(drop_path)
    assert model.stages[0].freq_embed.shape == (56, 56, model.dims[0])


@pytest.mark.slow
def test_1024_input(micro: VHeat) -> None:
    with torch.no_grad():
        assert micro(torch.randn(1, 3, 1024, 1024)).shape == (1, 7)


def test_create_model_arguments() -> None:
    model = timm.create_model("vheat_micro", num_classes=5, in_chans=1, drop_path_rate=0.2, img_size=96)
    assert model.stages[0].freq_embed.shape[:2] == (24, 24)
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 1, 96, 96)).shape == (2, 5)


def test_gradients_flow_to_all_parameters() -> None:
    model = timm.create_model("vheat_micro", num_classes=4)
    with torch.no_grad():
        for stage in model.stages:
            for block in stage.blocks:
                block.mixer.to_k[0].bias.fill_(0.5)
    model(torch.randn(2, 3, 64, 64)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_dct_methods_give_same_logits(method: str, micro: VHeat) -> None:
    other = timm.create_model("vheat_micro", num_classes=7, dct_method=method).eval()
    other.load_state_dict(micro.state_dict())
    x = torch.randn(2, 3, 72, 64)
    with torch.no_grad():
        torch.testing.assert_close(other(x), micro(x), rtol=1e-4, atol=1e-5)


def test_fve_at_training_size_used_unchanged(micro: VHeat) -> None:
    stage = micro.stages[1]
    assert stage.fve(stage.feat_size) is stage.freq_embed


def test_fve_pad_rule() -> None:
    model = timm.create_model("vheat_micro", fve_resize="pad")
    fve = model.stages[0].fve((20, 18))
    torch.testing.assert_close(fve[:16, :16], model.stages[0].freq_embed)
    assert fve[16:].abs().sum() == 0
    assert model(torch.randn(1, 3, 80, 72)).shape == (1, 1000)
    with pytest.raises(ValueError, match="fve_resize"):
        timm.create_model("vheat_micro", fve_resize="bilinear")


def test_reparameterize_folds_and_matches(micro: VHeat) -> None:
    folded = reparameterize_model(micro)
    assert folded is not micro
    assert all(b.mixer.k_exp is not None for s in folded.stages for b in s.blocks)
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), micro(x), rtol=1e-5, atol=1e-5)
        # the projection does not run on the folded path
        for s in folded.stages:
            for b in s.blocks:
                b.mixer.to_k.register_forward_hook(lambda *_: pytest.fail("to_k ran on the folded path"))
        folded(x)
    for s in folded.stages:
        for b in s.blocks:
            b.mixer.to_k._forward_hooks.clear()
    # another size falls back to the general path and still matches the unfolded model
    y = torch.randn(1, 3, 96, 80)
    with torch.no_grad():
        torch.testing.assert_close(folded(y), micro(y), rtol=1e-5, atol=1e-5)


def test_fold_for_another_resolution(micro: VHeat) -> None:
    model = timm.create_model("vheat_micro", num_classes=7).eval()
    model.load_state_dict(micro.state_dict())
    model.reparameterize(img_size=(96, 80))
    assert model.stages[0].folded_size() == (24, 20)
    y = torch.randn(1, 3, 96, 80)
    with torch.no_grad():
        torch.testing.assert_close(model(y), micro(y), rtol=1e-5, atol=1e-5)


def test_pretrained_file_safetensors_and_folded_state(tmp_path: Path, micro: VHeat) -> None:
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = micro(x)
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(micro.state_dict(), str(path))
    loaded = timm.create_model(
        "vheat_micro",
        num_classes=7,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path), num_classes=7),
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), ref)
    # our own folded state dict (with k_exp buffers) loads into a fresh model too
    folded = reparameterize_model(micro)
    path2 = tmp_path / "folded.pth"
    torch.save(folded.state_dict(), path2)
    loaded2 = timm.create_model(
        "vheat_micro",
        num_classes=7,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path2), num_classes=7),
    ).eval()
    assert loaded2.stages[0].folded_size() == (16, 16) and not loaded2.stages[0].folded_only
    with torch.no_grad():
        torch.testing.assert_close(loaded2(x), ref, rtol=1e-5, atol=1e-5)


def test_pretrained_with_new_head_drops_classifier(tmp_path: Path, micro: VHeat) -> None:
    path = tmp_path / "w.pth"
    torch.save({"model": micro.state_dict()}, path)
    model = timm.create_model(
        "vheat_micro",
        num_classes=3,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path), num_classes=7),
    )
    torch.testing.assert_close(model.stages[2].freq_embed, micro.stages[2].freq_embed)
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 3)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="one entry per stage"):
        VHeat(dims=[8, 16], depths=(1, 1, 1))
    with pytest.raises(TypeError, match="unexpected arguments"):
        VHeat(dimz=8)


def test_training_after_folding_reaches_the_fve_and_projection() -> None:
    model = timm.create_model("vheat_micro", num_classes=4)
    with torch.no_grad():
        for stage in model.stages:
            for block in stage.blocks:
                block.mixer.to_k[0].bias.fill_(0.5)
    model.reparameterize()
    model.train()(torch.randn(2, 3, 64, 64)).sum().backward()
    assert model.stages[0].freq_embed.grad is not None and model.stages[0].freq_embed.grad.abs().sum() > 0
    assert model.stages[0].blocks[0].mixer.to_k[0].weight.grad is not None
