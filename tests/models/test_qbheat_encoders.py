"""QB-Heat on other encoders: the ViT that MAE pretrains (block tokens as a feature grid) and a timm ConvNet
(resnet18); shapes, positions, gradients and refused encoders. (Pretraining them through the library and the
command line: tests/tasks/pretrain/test_pretrain_encoders.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pdevision.models import MAE, QBHeat
from pdevision.models.factory import create_model
from pdevision.models.qbheat_encoders import vit_block_tokens

VIT = "vit_tiny_patch16_224"
VIT_ARGS = {"patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 2, "global_pool": "avg"}
SMALL = dict(img_size=64, decoder_depth=1, decoder_width=32, decoder_heads=2, pred_dim=32)


def test_vit_block_tokens_are_maes_encoding_of_the_same_patches() -> None:
    """QB-Heat's ViT path is MAE's encoder on the block's patches: same tokens, same positions."""
    torch.manual_seed(0)
    mae = MAE(VIT, img_size=64, encoder_args=VIT_ARGS, decoder_depth=1).eval()
    images = torch.randn(2, 3, 64, 64)
    top, left = 1, 3  # a 4x4-cell block of the 8x8 grid, off centre
    keep = torch.tensor([r * 8 + c for r in range(top, top + 4) for c in range(left, left + 4)]).expand(2, -1)
    expected = mae.encode(images, keep)  # (B, 16, D), raster order
    crop = images[:, :, top * 8 : top * 8 + 32, left * 8 : left * 8 + 32]
    got = vit_block_tokens(mae.encoder, crop, (top, left), (8, 8))
    assert got.shape == (2, 64, 4, 4)
    torch.testing.assert_close(got.flatten(2).transpose(1, 2), expected, atol=1e-5, rtol=1e-5)
    # the positions come from the block's place: the same pixels elsewhere give other features
    moved = vit_block_tokens(mae.encoder, crop, (0, 0), (8, 8))
    assert (moved - got).abs().max() > 1e-3


@pytest.mark.parametrize(("model", "args", "position"), [(VIT, VIT_ARGS, "random"), ("resnet18", {}, "center")])
def test_shapes_gradients_and_only_the_block_reaches_the_encoder(model: str, args: dict, position: str) -> None:
    torch.manual_seed(0)
    qb = QBHeat(model, block_position=position, encoder_args=args, **SMALL)
    assert qb.encoder_kind == ("tokens" if model == VIT else "intermediates")
    assert "dynamic_img_size" not in qb.encoder_args  # the ViT is built as MAE builds it
    images = torch.randn(3, 3, 64, 64)
    z = qb.encode(images[:, :, 16:48, 16:48])
    assert z.shape == (3, 32, 4, 4)
    torch.manual_seed(1)
    out = qb(images)
    assert out["prediction"].shape == (3, 64, 8 * 8 * 3) and out["hidden"].sum() == 48
    out["loss"].backward()
    assert qb.encoder.patch_embed.proj.weight.grad.abs().sum() > 0 if model == VIT else True
    # resnet18's residual branches end in a zero-initialised BN scale (timm's zero_init_last): after one step
    # every encoder parameter gets a gradient, but for the ViT's pooled-feature norm (after pooling, as in MAE)
    torch.optim.SGD(qb.parameters(), lr=0.1).step()
    qb.zero_grad()
    qb(images)["loss"].backward()
    unused = {"fc_norm.weight", "fc_norm.bias"}
    for name, p in qb.encoder.named_parameters():
        if name not in unused:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    # pixels outside the block never reach the prediction
    top, left = out["offset"]
    outside = torch.ones_like(images, dtype=torch.bool)
    outside[..., top * 8 : top * 8 + 32, left * 8 : left * 8 + 32] = False
    qb.eval()
    first = qb(images, offset=(top, left))["prediction"]
    second = qb(torch.where(outside, 10 * torch.randn_like(images), images), offset=(top, left))["prediction"]
    torch.testing.assert_close(first, second)


class _NoFeatures(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_unusable_encoders_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="_NoFeatures has no forward_intermediates"):
        QBHeat(_NoFeatures(), **SMALL)
    with pytest.raises(ValueError, match=r"ViT with 16x16 patches: QB-Heat's --stride must be its patch size"):
        QBHeat(VIT, encoder_args={"depth": 1}, **SMALL)
    built_elsewhere = create_model(VIT, num_classes=0, img_size=32, **VIT_ARGS)
    with pytest.raises(ValueError, match=r"built for a 4x4 patch grid, not the 64 px image's 8x8"):
        QBHeat(built_elsewhere, **SMALL)
    qb = QBHeat(VIT, encoder_args=VIT_ARGS, **SMALL)
    with pytest.raises(ValueError, match="built for 64 px images"):
        qb(torch.randn(1, 3, 80, 80))
