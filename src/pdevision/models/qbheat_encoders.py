"""How QB-Heat takes a feature grid of the visible block from an encoder: one adapter per kind of backbone.

QB-Heat (arXiv:2211.13228) needs, for the visible block only, a feature map ``(B, C, h, w)`` with one cell per
``stride x stride`` pixel patch. Two kinds of backbone give one:

* ``"tokens"``: a timm :class:`~timm.models.vision_transformer.VisionTransformer` (the ViT that MAE pretrains).
  The block is cut out, embedded patch by patch (the ViT's own ``patch_embed``), and each of its tokens gets the
  position embedding of *its place in the whole image* (the ViT is built at the full image size, as MAE's is), so
  the encoder is the very module MAE trains and fine-tuning needs no position resampling; prefix (class,
  register) tokens are kept. The ViT's blocks and final norm run on the block's tokens only (the same calls as
  :meth:`pdevision.models.MAE.encode`), and the tokens are reshaped to the block's grid (NCHW). The feature stride
  is the patch size. This is our adapter: the QB-Heat source (a blog post on the paper) says only that a
  contiguous block lets the encoder be a Transformer or a plain CNN, not how positions are given.
* ``"intermediates"``: any other backbone with ``forward_intermediates`` and ``feature_info`` (this library's
  families, timm's ConvNets such as ``resnet18``): the crop is run as an image of its own and the stages at the
  chosen strides are returned (NCHW).

Anything else (no ``forward_intermediates``, no ``feature_info``, a ViT whose patch size is not the stride or
whose grid is not the image's) is refused with a one-line :class:`ValueError`.
"""

from __future__ import annotations

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

KINDS = ("tokens", "intermediates")


def encoder_kind(encoder: nn.Module, name: str, img_size: int, stride: int) -> str:
    """``"tokens"`` for a timm ViT, ``"intermediates"`` for a backbone with ``forward_intermediates``; a one-line
    :class:`ValueError` when QB-Heat cannot take a stride-``stride`` feature grid from ``encoder``."""
    if isinstance(encoder, VisionTransformer):
        patch = tuple(int(p) for p in encoder.patch_embed.patch_size)
        if patch != (stride, stride):
            raise ValueError(
                f"{name} is a ViT with {patch[0]}x{patch[1]} patches: QB-Heat's --stride must be its patch size "
                f"({patch[0]}), got {stride}"
            )
        grid = tuple(int(g) for g in encoder.patch_embed.grid_size)
        if grid != (img_size // stride, img_size // stride):
            raise ValueError(
                f"{name} was built for a {grid[0]}x{grid[1]} patch grid, not the {img_size} px image's "
                f"{img_size // stride}x{img_size // stride}; build it at img_size={img_size}"
            )
        return "tokens"
    if not callable(getattr(encoder, "forward_intermediates", None)):
        raise ValueError(
            f"{name} has no forward_intermediates: QB-Heat cannot take its feature maps "
            "(use a timm ViT, a timm ConvNet such as resnet18, or one of this library's models)"
        )
    if not getattr(encoder, "feature_info", None):
        raise ValueError(f"{name} has no feature_info: QB-Heat cannot tell the strides of its feature maps")
    return "intermediates"


def vit_block_tokens(
    encoder: VisionTransformer, crop: torch.Tensor, offset: tuple[int, int], grid: tuple[int, int]
) -> torch.Tensor:
    """A timm ViT on the visible block only, with the positions of the block's place in the image.

    ``crop`` ``(B, 3, h p, w p)`` NCHW is the block at cell ``offset`` = (top, left) of the image's ``grid``
    (cells = patches). Returns the final-norm tokens of the block as a grid ``(B, D, h, w)`` NCHW.
    """
    enc = encoder
    pe = enc.patch_embed
    tokens = pe.proj(crop)  # (B, D, h, w): the ViT's own patch embedding, one token per patch of the block
    b, d, h, w = tokens.shape
    top, left = offset
    # place the block's tokens in an otherwise empty full grid and let timm add the positions (and prepend the
    # prefix tokens) exactly as for a whole image; the empty cells are dropped again before the blocks
    full = tokens.new_zeros(b, grid[0], grid[1], d)
    full[:, top : top + h, left : left + w] = pe.norm(tokens.permute(0, 2, 3, 1))
    x = enc._pos_embed(full if getattr(enc, "dynamic_img_size", False) else full.flatten(1, 2))
    prefix = enc.num_prefix_tokens
    rows = torch.arange(top, top + h, device=crop.device)
    cols = torch.arange(left, left + w, device=crop.device)
    keep = (rows[:, None] * grid[1] + cols[None, :]).flatten() + prefix
    x = torch.cat([x[:, :prefix], x[:, keep]], dim=1)
    x = enc.norm(enc.blocks(enc.norm_pre(x)))  # as MAE.encode: no patch dropout, no pooling
    return x[:, prefix:].transpose(1, 2).reshape(b, d, h, w)


def block_features(
    encoder: nn.Module,
    kind: str,
    crop: torch.Tensor,
    indices: list[int],
    offset: tuple[int, int],
    grid: tuple[int, int],
) -> list[torch.Tensor]:
    """Feature maps ``(B, C_i, h_i, w_i)`` NCHW of the visible block ``crop``: the ViT's token grid (``"tokens"``)
    or the stages ``indices`` of ``forward_intermediates`` (``"intermediates"``)."""
    if kind == "tokens":
        return [vit_block_tokens(encoder, crop, offset, grid)]
    if kind == "intermediates":
        return list(
            encoder.forward_intermediates(crop, indices=indices, norm=True, output_fmt="NCHW", intermediates_only=True)
        )
    raise ValueError(f"encoder kind must be one of {KINDS}, got {kind!r}")


__all__ = ["KINDS", "block_features", "encoder_kind", "vit_block_tokens"]
