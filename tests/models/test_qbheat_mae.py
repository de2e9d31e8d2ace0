"""QB-Heat and MAE models: what the encoder sees, masking, learning on one batch, clear errors."""

from __future__ import annotations

import pytest
import torch

from pdevision.layers.decoder import normalise_patches, patchify, to_pixels, unpatchify
from pdevision.models import MAE, QBHeat

VIT_ARGS = {"patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 2}


def _record_encoder_inputs(model: QBHeat) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    original = model.encoder.forward_intermediates

    def spy(x: torch.Tensor, *args, **kwargs):
        seen.append(x.detach().clone())
        return original(x, *args, **kwargs)

    model.encoder.forward_intermediates = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("position", ["center", "random"])
def test_encoder_never_receives_pixels_outside_the_block(position: str) -> None:
    model = QBHeat("vheat_micro", img_size=64, block_position=position, decoder_depth=1)
    seen = _record_encoder_inputs(model)
    images = torch.randn(2, 3, 64, 64)
    torch.manual_seed(1)
    first = model(images)
    top, left = first["offset"]
    outside = torch.ones_like(images, dtype=torch.bool)
    outside[..., top * 8 : top * 8 + 32, left * 8 : left * 8 + 32] = False
    perturbed = torch.where(outside, torch.randn_like(images) * 10, images)
    torch.manual_seed(1)  # the same block position
    second = model(perturbed)
    assert second["offset"] == (top, left)
    assert [tuple(x.shape) for x in seen] == [(2, 3, 32, 32)] * 2  # the block only, never the image
    assert torch.equal(seen[0], seen[1])
    assert torch.equal(first["prediction"], second["prediction"])  # nothing outside reaches the prediction
    assert not torch.equal(first["loss"], second["loss"])  # (the targets outside did change)
    assert first["hidden"].sum() == 64 - 16  # a quarter of the area is visible
    if position == "center":
        assert (top, left) == (2, 2)


def test_qbheat_loss_goes_down_on_one_batch() -> None:
    torch.manual_seed(0)
    model = QBHeat("vheat_micro", img_size=64, decoder_depth=1, decoder_width=64, pred_dim=64)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 64), torch.linspace(-1, 1, 64), indexing="ij")
    images = torch.stack([torch.sin(4 * xx + 3 * k * yy) for k in range(3)]).expand(4, -1, -1, -1).clone()
    images = images + 0.1 * torch.randn_like(images)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(30):
        loss = model(images)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert model.predictor.weight_a.abs().sum() > 0  # A and B are learned


def test_mae_loss_goes_down_on_one_batch() -> None:
    torch.manual_seed(0)
    model = MAE("vit_tiny_patch16_224", img_size=32, decoder_depth=1, decoder_width=64, encoder_args=VIT_ARGS)
    images = torch.randn(4, 3, 32, 32).cumsum(-1) / 8
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(30):
        torch.manual_seed(1)  # the same mask every step: the batch can be memorised
        loss = model(images)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses


def test_mae_masks_75_percent_and_fills_mask_tokens() -> None:
    model = MAE("vit_tiny_patch16_224", img_size=64, encoder_args=VIT_ARGS)
    tokens_in: list[int] = []
    model.encoder.blocks[0].register_forward_hook(lambda m, a, o: tokens_in.append(a[0].shape[1]))
    out = model(torch.randn(3, 3, 64, 64))
    assert out["hidden"].shape == (3, 64)
    assert torch.equal(out["hidden"].sum(1), torch.full((3,), 48.0))  # 75% of 64 patches masked
    assert out["keep"].shape == (3, 16) and all(len(set(k.tolist())) == 16 for k in out["keep"])
    assert tokens_in == [1 + 16]  # the encoder sees the class token and the 16 kept patches only
    assert not torch.equal(out["keep"][0].sort().values, out["keep"][1].sort().values)  # per image
    assert model.mask_token.shape == (1, 1, 128)
    out["loss"].backward()
    assert model.mask_token.grad is not None and model.mask_token.grad.abs().sum() > 0
    assert out["prediction"].shape == (3, 64, 8 * 8 * 3)


def test_same_decoder_for_both_methods() -> None:
    q = QBHeat("vheat_micro", img_size=64)
    m = MAE("vit_tiny_patch16_224", img_size=64, encoder_args={"patch_size": 8, "depth": 4})
    q_params = sum(p.numel() for p in q.decoder.parameters())
    m_params = sum(p.numel() for p in m.decoder.parameters())
    assert abs(q_params - m_params) / m_params < 0.05  # only the input embedding differs (128 vs 192 channels)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(img_size=64, block_size=64), r"block \(64 px\) must be smaller than the image \(64 px\)"),
        (dict(img_size=64, block_size=96), r"block \(96 px\) must be smaller than the image"),
        (dict(img_size=64, block_size=12), r"block size 12 must be a positive multiple of the feature stride 8"),
        (dict(img_size=64, block_size=16), r"below vheat_micro's minimum input of 32 px"),
        (dict(img_size=64, stride=2), r"feature strides \[4, 8, 16, 32\]; --stride 2 is not one"),
        (dict(img_size=60), r"image size 60 must be a multiple of the feature stride 8"),
        (dict(block_position="corner"), r"block position must be one of"),
    ],
)
def test_bad_qbheat_settings_are_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QBHeat("vheat_micro", **kwargs)


def test_wrong_image_size_and_non_vit_mae_are_clear_errors() -> None:
    model = QBHeat("vheat_micro", img_size=64, decoder_depth=1)
    with pytest.raises(ValueError, match=r"images of 32x32 px do not fit QB-Heat"):
        model(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="MAE needs a timm VisionTransformer encoder"):
        MAE("vheat_micro")
    with pytest.raises(ValueError, match="mask ratio must be between 0 and 1"):
        MAE(mask_ratio=1.0)


def test_transformer_encoder_conv_decoder_exact_predictor_and_whole_image_loss() -> None:
    model = QBHeat(
        "vit_tiny_patch16_224",
        img_size=64,
        predictor="exact",
        decoder="conv",
        loss_region="all",
        encoder_args=VIT_ARGS,
    )
    assert model.encoder_kind == "tokens" and "dynamic_img_size" not in model.encoder_args  # built as MAE's
    out = model(torch.randn(2, 3, 64, 64))
    out["loss"].backward()
    assert out["prediction"].shape == (2, 64, 8 * 8 * 3) and torch.isfinite(out["loss"])
    recon = model.eval().reconstruct(torch.randn(2, 3, 64, 64))
    assert set(recon) == {"visible", "prediction", "target"} and recon["prediction"].shape == (2, 3, 64, 64)


def test_patch_helpers_round_trip() -> None:
    images = torch.randn(2, 3, 16, 24)
    patches = patchify(images, 8)
    assert patches.shape == (2, 6, 192)
    torch.testing.assert_close(unpatchify(patches, 8, (2, 3)), images)
    norm = normalise_patches(images, 8)
    torch.testing.assert_close(norm.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)
    torch.testing.assert_close(to_pixels(norm, images, 8), images, atol=1e-4, rtol=0)
