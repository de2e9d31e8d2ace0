"""Dense-prediction models on every family: smp decoders and torchvision R-CNNs at odd sizes; the vHeat
authors' downstream FVE rule against a hand (numpy) reference."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

import pdevision.models  # noqa: F401  (registers the families)
from pdevision.models.dense import (
    BackboneWithFPN,
    create_detection_model,
    create_segmentation_model,
)
from pdevision.models.factory import ModelNameError
from pdevision.models.vheat import checkpoint_filter_fn
from pdevision.ops.heat import resize_spectrum

FAMILIES = ["vheat_micro", "hcnet_micro", "pderesnet_micro"]
SMALL_DET = dict(
    min_size=48,
    max_size=80,
    fpn_channels=32,
    detector_kwargs=dict(
        rpn_pre_nms_top_n_train=64,
        rpn_post_nms_top_n_train=32,
        rpn_pre_nms_top_n_test=32,
        rpn_post_nms_top_n_test=16,
        box_batch_size_per_image=16,
        box_detections_per_img=8,
    ),
)


def _grads_reach_backbone(model: torch.nn.Module, prefix_filter: str) -> bool:
    grads = [p.grad for n, p in model.named_parameters() if prefix_filter in n and p.requires_grad]
    return bool(grads) and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


# -- segmentation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backbone,head",
    [("vheat_micro", "upernet"), ("hcnet_micro", "fpn"), ("pderesnet_micro", "unet")],
)
def test_segmentation_any_size_and_gradients(backbone: str, head: str) -> None:
    model = create_segmentation_model(backbone, 4, head=head, img_size=64, decoder_channels=32)
    x = torch.randn(2, 3, 45, 71)  # neither a multiple of 32 nor square
    out = model(x)
    assert out.shape == (2, 4, 45, 71)
    out.square().mean().backward()
    assert _grads_reach_backbone(model, "encoder.model")
    assert x.grad is None


@pytest.mark.slow
@pytest.mark.parametrize("backbone", FAMILIES)
@pytest.mark.parametrize("head", ["upernet", "fpn", "unet"])
def test_segmentation_all_families_all_heads(backbone: str, head: str) -> None:
    model = create_segmentation_model(backbone, 3, head=head, img_size=64, decoder_channels=32)
    out = model(torch.randn(2, 3, 67, 33))  # two images: UPerNet's pooled BatchNorm needs more than one value
    assert out.shape == (2, 3, 67, 33)
    out.mean().backward()
    assert _grads_reach_backbone(model, "encoder.model")


def test_segmentation_padding_does_not_leak_into_the_image() -> None:
    """Pixels of the input decide the logits inside it; the zero padding is cropped away."""
    model = create_segmentation_model("pderesnet_micro", 2, head="fpn", decoder_channels=16).eval()
    x = torch.randn(1, 3, 40, 40)
    padded = torch.nn.functional.pad(x, (0, 24, 0, 24))
    with torch.no_grad():
        assert torch.allclose(model(x), model.net(padded)[..., :40, :40], atol=1e-5)


def test_segmentation_timm_nhwc_backbone() -> None:
    """Swin gives NHWC maps; smp's encoder permutes them and the wrapper pads to the stride."""
    model = create_segmentation_model(
        "swin_tiny_patch4_window7_224",
        2,
        head="upernet",
        img_size=64,
        embed_dim=24,
        depths=(1, 1, 1, 1),
        num_heads=(1, 1, 1, 1),
        decoder_channels=16,
        strict_img_size=False,
    )
    assert str(model.backbone.output_fmt).endswith("NHWC")
    assert model.eval()(torch.randn(1, 3, 50, 70)).shape == (1, 2, 50, 70)


def test_frequency_embeddings_get_no_weight_decay() -> None:
    """vHeat's FVEs stay out of weight decay under both heads (timm's optimizer factory asks for them)."""
    from timm.optim import create_optimizer_v2

    seg = create_segmentation_model("vheat_micro", 2, head="fpn", img_size=64, decoder_channels=32)
    det = create_detection_model("vheat_micro", 2, img_size=64, **SMALL_DET)
    for model in (seg, det):
        names = model.no_weight_decay()
        assert len(names) == 4 and all(n.endswith("freq_embed") for n in names)
        opt = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)  # as the loop makes it
        decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
        fve = [p for n, p in model.named_parameters() if n.endswith("freq_embed")]
        assert fve and not any(id(p) in decayed for p in fve)


def test_segmentation_bad_names() -> None:
    with pytest.raises(ModelNameError, match="unknown model"):
        create_segmentation_model("vheat_mikro", 2)
    with pytest.raises(ValueError, match="segmentation head"):
        create_segmentation_model("vheat_micro", 2, head="deeplab")


def test_segmentation_init_from_classification_checkpoint(tmp_path) -> None:
    """A classifier's weights land in the encoder (its head is dropped)."""
    from pdevision.engine.save import save_checkpoint

    clf = timm.create_model("hcnet_micro", num_classes=7)
    save_checkpoint(tmp_path, "best", clf, {"model": "hcnet_micro"})
    weights = tmp_path / "best" / "model.safetensors"  # the models layer takes the weights file, not the folder
    src = clf.state_dict()
    for checkpoint in (weights, src):  # or a state dict
        model = create_segmentation_model("hcnet_micro", 3, head="fpn", checkpoint=checkpoint)
        enc = model.backbone.state_dict()
        shared = [k for k in enc if k.removeprefix("model.") in src]
        assert len(shared) > 10
        for k in shared:
            assert torch.equal(enc[k], src[k.removeprefix("model.")]), k
    assert set(src) == set(clf.state_dict())  # the caller's state dict keeps its classifier
    with pytest.raises(IsADirectoryError, match="pass its weights file"):
        create_segmentation_model("hcnet_micro", 3, head="fpn", checkpoint=tmp_path / "best")


# -- detection ------------------------------------------------------------------------------------


def _targets(sizes: list[tuple[int, int]]) -> list[dict[str, torch.Tensor]]:
    out = []
    for i, (h, w) in enumerate(sizes):
        masks = torch.zeros(1, h, w, dtype=torch.uint8)
        masks[0, 5:25, 4:30] = 1
        out.append(dict(boxes=torch.tensor([[4.0, 5.0, 30.0, 25.0]]), labels=torch.tensor([1 + i % 2]), masks=masks))
    return out


@pytest.mark.parametrize("backbone,head", [("vheat_micro", "mask_rcnn"), ("pderesnet_micro", "faster_rcnn")])
def test_detection_odd_sizes_losses_and_outputs(backbone: str, head: str) -> None:
    model = create_detection_model(backbone, 2, head=head, img_size=64, **SMALL_DET)
    sizes = [(45, 71), (61, 50)]
    images = [torch.rand(3, *s) for s in sizes]
    model.train()
    losses = model(images, _targets(sizes))
    assert ("loss_mask" in losses) == (head == "mask_rcnn")
    sum(losses.values()).backward()
    assert _grads_reach_backbone(model, "backbone.body")
    model.eval()
    with torch.no_grad():
        out = model(images)
    for o, (h, w) in zip(out, sizes, strict=True):
        assert o["boxes"].shape[1] == 4
        if len(o["boxes"]):  # boxes are in the image's own coordinates
            assert float(o["boxes"][:, 2].max()) <= w + 1e-3 and float(o["boxes"][:, 3].max()) <= h + 1e-3
        if head == "mask_rcnn":
            assert o["masks"].shape[-2:] == (h, w)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", FAMILIES)
@pytest.mark.parametrize("head", ["mask_rcnn", "faster_rcnn"])
def test_detection_all_families(backbone: str, head: str) -> None:
    model = create_detection_model(backbone, 3, head=head, img_size=64, **SMALL_DET)
    sizes = [(47, 33), (70, 90)]
    losses = model([torch.rand(3, *s) for s in sizes], _targets(sizes))
    sum(losses.values()).backward()
    assert _grads_reach_backbone(model, "backbone.body")


def test_backbone_with_fpn_levels_and_norms() -> None:
    """Strides 4..64 (P2-P6); timm's ResNet (stride-2 stem map dropped) and our NHWC-run families."""
    x = torch.randn(1, 3, 64, 96)
    fpn = BackboneWithFPN("resnet18", out_channels=16)
    out = fpn(x)
    assert list(out) == ["0", "1", "2", "3", "pool"]
    assert [tuple(v.shape[-2:]) for v in out.values()] == [(16, 24), (8, 12), (4, 6), (2, 3), (1, 2)]
    assert all(isinstance(n, torch.nn.Identity) for n in fpn.out_norms)  # BatchNorm nets keep their maps
    vfpn = BackboneWithFPN("vheat_micro", out_channels=16, img_size=64)
    assert all(isinstance(n, timm.layers.LayerNorm2d) for n in vfpn.out_norms)
    assert vfpn(x)["0"].shape == (1, 16, 16, 24)


# -- the vHeat authors' downstream FVE rule -------------------------------------------------------


def _cubic(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    t = np.abs(t)
    return np.where(
        t <= 1, (a + 2) * t**3 - (a + 3) * t**2 + 1, np.where(t < 2, a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a, 0.0)
    )


def _bicubic_matrix(n_out: int, n_in: int) -> np.ndarray:
    """Keys' cubic convolution (a = -0.75), half-pixel centres, edge samples repeated."""
    m = np.zeros((n_out, n_in))
    for j in range(n_out):
        src = (j + 0.5) * n_in / n_out - 0.5
        base = int(np.floor(src))
        for k in range(base - 1, base + 3):
            m[j, min(max(k, 0), n_in - 1)] += _cubic(np.array(src - k))
    return m


@pytest.mark.parametrize("size", [(11, 9), (5, 4), (7, 7)])
def test_downstream_resize_is_bicubic(size: tuple[int, int]) -> None:
    spec = torch.randn(7, 6, 3, dtype=torch.float64)
    out = resize_spectrum(spec, size, "downstream")
    ref = np.einsum("ih,jw,hwc->ijc", _bicubic_matrix(size[0], 7), _bicubic_matrix(size[1], 6), spec.numpy())
    assert out.shape == (*size, 3)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-10)
    assert resize_spectrum(spec, (7, 6), "downstream") is spec


def test_downstream_rule_pads_at_load_and_resamples_at_run_time() -> None:
    """Load: a 64-px FVE zero-padded to the 96-px model's size; run time at 128 px: bicubic."""
    src = timm.create_model("vheat_micro", img_size=64, num_classes=0)
    model = timm.create_model("vheat_micro", img_size=96, num_classes=0, fve_resize="downstream")
    state = checkpoint_filter_fn(src.state_dict(), model)
    for i in range(4):
        old, new = src.stages[i].freq_embed, state[f"stages.{i}.freq_embed"]
        h, w = old.shape[:2]
        assert new.shape[:2] == model.stages[i].feat_size
        assert torch.equal(new[:h, :w], old)
        assert torch.all(new[h:] == 0) and torch.all(new[:, w:] == 0)
    model.load_state_dict(state)
    stage = model.stages[0]
    expected = torch.nn.functional.interpolate(
        stage.freq_embed.permute(2, 0, 1)[None], size=(32, 32), mode="bicubic", align_corners=False
    )[0].permute(1, 2, 0)
    torch.testing.assert_close(stage.fve((32, 32)), expected)
    with pytest.raises(ValueError, match="downstream"):
        timm.create_model("vheat_micro", fve_resize="nearest")
