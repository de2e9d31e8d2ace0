"""Behaviour every family shares through StagedBackbone: clear errors for bad input."""

from __future__ import annotations

import pytest
import timm
import torch

import pdevision  # noqa: F401

MICROS = ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"]


@pytest.mark.parametrize("name", MICROS)
@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((2, 1, 64, 64), r"expected 3 input channels.*got 1 channels in shape \(2, 1, 64, 64\)"),
        ((2, 3, 31, 64), r"at least 32.*got 31x64"),
        ((3, 64, 64), r"4-D tensor of shape \(batch, 3, height, width\), got 3-D shape \(3, 64, 64\)"),
        ((1, 2, 3, 64, 64), r"got 5-D"),
    ],
)
def test_bad_input_is_clear(name: str, shape: tuple[int, ...], match: str) -> None:
    model = timm.create_model(name, num_classes=3).eval()
    with pytest.raises(ValueError, match=match):
        model(torch.randn(*shape))
    with pytest.raises(ValueError, match=match):
        model.forward_intermediates(torch.randn(*shape))


@pytest.fixture(scope="module", params=MICROS)
def micro(request: pytest.FixtureRequest) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(request.param, num_classes=7).eval()


@pytest.mark.parametrize("size", [(225, 317), (64, 64), (33, 45), (32, 32)])
def test_any_input_size_batch_one(micro: torch.nn.Module, size: tuple[int, int]) -> None:
    with torch.no_grad():
        out = micro(torch.randn(1, 3, *size))
    assert out.shape == (1, 7) and torch.isfinite(out).all()


def test_forward_features_and_head(micro: torch.nn.Module) -> None:
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        feats = micro.forward_features(x)
        spatial = feats.shape[1:3] if micro.output_fmt == "NHWC" else feats.shape[2:]
        assert tuple(spatial) == (2, 2) and micro.num_features in feats.shape
        assert micro.forward_head(feats, pre_logits=True).shape == (2, micro.num_features)
        torch.testing.assert_close(micro.forward_head(feats), micro(x))


def test_forward_intermediates_follow_feature_info(micro: torch.nn.Module) -> None:
    x = torch.randn(2, 3, 96, 80)
    with torch.no_grad():
        final, inter = micro.forward_intermediates(x)
        expected = [(2, f["num_chs"], -(-96 // f["reduction"]), -(-80 // f["reduction"])) for f in micro.feature_info]
        assert [tuple(t.shape) for t in inter] == expected
        torch.testing.assert_close(final, micro.forward_features(x))
        last = micro.forward_intermediates(x, indices=[1, 3], intermediates_only=True, norm=True)
        assert len(last) == 2
        nchw_final = final.permute(0, 3, 1, 2) if micro.output_fmt == "NHWC" else final
        torch.testing.assert_close(last[1], nchw_final)
        early = micro.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True, output_fmt="NHWC")
        torch.testing.assert_close(early[0], inter[0].permute(0, 2, 3, 1))
    with pytest.raises(ValueError, match="output_fmt"):
        micro.forward_intermediates(x, output_fmt="NLC")


@pytest.mark.parametrize("name", MICROS)
def test_features_only_and_pruning(name: str) -> None:
    full = timm.create_model(name)
    backbone = timm.create_model(name, features_only=True, out_indices=(1, 2))
    assert backbone.feature_info.channels() == [full.feature_info[i]["num_chs"] for i in (1, 2)]
    assert backbone.feature_info.reduction() == [8, 16]
    feats = backbone(torch.randn(1, 3, 64, 64))
    assert [tuple(f.shape) for f in feats] == [(1, full.dims[1], 8, 8), (1, full.dims[2], 4, 4)]
    assert full.prune_intermediate_layers([0, 1]) == [0, 1]
    assert len(full.stages) == 2 and full.num_classes == 0


@pytest.mark.parametrize("name", MICROS)
def test_create_arguments_and_reset_classifier(name: str) -> None:
    model = timm.create_model(name, num_classes=5, in_chans=1, drop_path_rate=0.2)
    assert model(torch.randn(2, 1, 64, 48)).shape == (2, 5)
    model.reset_classifier(3)
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, 3)
    model.reset_classifier(0)
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, model.num_features)
    assert model.get_classifier() is model.head.fc


@pytest.mark.parametrize("name", MICROS)
def test_grad_checkpointing_same_output_and_grads(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=4).train()
    for m in model.modules():  # BatchNorm statistics must not differ between the two passes
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eval()
    x = torch.randn(2, 3, 64, 64)
    out_ref = model(x)
    out_ref.sum().backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.set_grad_checkpointing(True)
    assert all(s.grad_checkpointing for s in model.stages)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out, out_ref)
    assert ref
    for n, g in ref.items():
        torch.testing.assert_close(dict(model.named_parameters())[n].grad, g, rtol=1e-4, atol=1e-6, msg=n)


def test_bfloat16_autocast_and_weights(micro: torch.nn.Module) -> None:
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = micro(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = micro(x)
        assert torch.isfinite(out).all()
        assert torch.corrcoef(torch.stack([out.float().flatten(), ref.flatten()]))[0, 1] > 0.9


@pytest.mark.parametrize("name", MICROS)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dims": 0}, r"dims must be positive channel counts, got \[0, 0, 0, 0\]"),
        ({"dims": -8}, "dims must be positive channel counts"),
        ({"in_chans": 0}, "in_chans must be a positive number of input channels, got 0"),
        ({"num_classes": -1}, r"num_classes must be 0 \(no classifier\) or more, got -1"),
        ({"depths": ()}, "depths must be a non-empty list of block counts"),
        ({"depths": (1, -1, 1, 1)}, r"depths must be a non-empty list of block counts >= ., got \(1, -1, 1, 1\)"),
    ],
)
def test_bad_architecture_arguments_are_one_clear_error(name: str, kwargs: dict[str, object], match: str) -> None:
    """They used to build a model that failed at its first forward, or to fail deep inside torch's layers."""
    with pytest.raises(ValueError, match=match):
        timm.create_model(name, **kwargs)


@pytest.mark.parametrize("name", ["vheat_micro", "hcnet_micro"])
@pytest.mark.parametrize(
    ("img_size", "match"),
    [(-32, "must be positive, got -32"), (64.5, "pair of ints, got 64.5"), ("64", "pair of ints, got '64'")],
)
def test_bad_image_size_is_one_clear_error(name: str, img_size: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        timm.create_model(name, img_size=img_size)
    model = timm.create_model(name).eval()
    with pytest.raises(ValueError, match=match):  # "64" used to fold for a 6x4 image
        model.reparameterize(img_size=img_size)


@pytest.mark.parametrize("name", MICROS)
def test_an_integer_image_tensor_is_a_clear_error(name: str) -> None:
    model = timm.create_model(name, num_classes=3).eval()
    for dtype in (torch.uint8, torch.int64, torch.bool):
        with pytest.raises(TypeError, match=rf"floating-point image tensor, got {dtype}.*x.float\(\) / 255"):
            model(torch.zeros(1, 3, 64, 64, dtype=dtype))
