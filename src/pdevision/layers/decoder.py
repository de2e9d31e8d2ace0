"""Pixel decoders and the reconstruction loss shared by QB-Heat and MAE.

Both methods decode a full grid of feature cells (``gh x gw``, one cell per ``p x p`` pixel patch) to pixels
with the same light decoder, so their decoders have the same size; they differ only in what fills the hidden
cells: heat-extrapolated features (QB-Heat) or a learned mask token (MAE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import Block
from torch import nn

DECODERS = ("transformer", "conv")


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W)`` NCHW to ``(B, N, patch * patch * C)`` patches in raster order (``N = H W / patch^2``)."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch) * (w // patch), patch * patch * c)


def unpatchify(patches: torch.Tensor, patch: int, grid: tuple[int, int], channels: int = 3) -> torch.Tensor:
    """Inverse of :func:`patchify`: ``(B, gh * gw, patch * patch * C)`` to ``(B, C, gh * patch, gw * patch)``."""
    b = patches.shape[0]
    gh, gw = grid
    x = patches.reshape(b, gh, gw, patch, patch, channels)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(b, channels, gh * patch, gw * patch)


def normalise_patches(images: torch.Tensor, patch: int, eps: float = 1e-6) -> torch.Tensor:
    """Per-patch normalised pixels (MAE's ``norm_pix_loss`` target), ``(B, N, patch * patch * C)``: each patch
    minus its mean over its ``patch * patch * C`` values, divided by ``sqrt(var + eps)``."""
    x = patchify(images, patch)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True)
    return (x - mean) / (var + eps).sqrt()


def reconstruction_loss(
    prediction: torch.Tensor, images: torch.Tensor, patch: int, hidden: torch.Tensor | None, norm_pix: bool = True
) -> torch.Tensor:
    """Mean squared error between predicted patches ``(B, N, p * p * C)`` and the (per-patch normalised) pixels
    of ``images`` ``(B, C, H, W)``, averaged over the patches where ``hidden`` ``(B, N)`` is 1 (all when None)."""
    target = normalise_patches(images, patch) if norm_pix else patchify(images, patch)
    per_patch = (prediction.float() - target.float()).pow(2).mean(-1)
    if hidden is None:
        return per_patch.mean()
    hidden = hidden.to(per_patch.dtype)
    return (per_patch * hidden).sum() / hidden.sum().clamp_min(1.0)


def to_pixels(prediction: torch.Tensor, images: torch.Tensor, patch: int, norm_pix: bool = True) -> torch.Tensor:
    """Predicted patches ``(B, N, p * p * C)`` as an image ``(B, C, H, W)``; with ``norm_pix`` each patch is
    de-normalised with the mean and variance of the true patch (for display only, as in MAE's visualisation)."""
    _, c, h, w = images.shape
    if norm_pix:
        x = patchify(images, patch)
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True)
        prediction = prediction * (var + 1e-6).sqrt() + mean
    return unpatchify(prediction, patch, (h // patch, w // patch), c)


class TokenDecoder(nn.Module):
    """MAE-style decoder: linear embedding, fixed 2-D sin-cos positions, ``depth`` transformer blocks (ViT ``Block``,
    pre-norm attention + MLP), LayerNorm, linear map to the ``patch x patch x C`` pixels of each cell.

    ``embed(x)``: ``(B, N, in_dim)`` tokens to ``(B, N, width)``; ``forward_embedded(x, grid)``: ``(B, gh * gw,
    width)`` in raster order to patches ``(B, gh * gw, patch * patch * C)``.
    """

    def __init__(self, in_dim: int, patch: int, width: int = 128, depth: int = 2, heads: int = 4, channels: int = 3):
        super().__init__()
        if width % heads or width % 4:
            raise ValueError(f"decoder width {width} must be a multiple of 4 and of the heads ({heads})")
        self.width, self.patch = width, patch
        self.embed = nn.Linear(in_dim, width)
        self.blocks = nn.Sequential(*[Block(width, heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.pred = nn.Linear(width, patch * patch * channels)

    def forward_embedded(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        pos = build_sincos2d_pos_embed(list(grid), self.width, device=x.device, dtype=x.dtype)
        x = self.blocks(x + pos.unsqueeze(0))
        return self.pred(self.norm(x))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Feature grid ``(B, in_dim, gh, gw)`` NCHW to patches ``(B, gh * gw, patch * patch * C)``."""
        grid = tuple(features.shape[-2:])
        return self.forward_embedded(self.embed(features.flatten(2).transpose(1, 2)), grid)


class ConvDecoder(nn.Module):
    """Convolutional decoder: 1x1 embedding, ``depth`` residual blocks ``x + Conv1x1(GELU(Conv3x3(GN(x))))``,
    GroupNorm, 1x1 map to the ``patch x patch x C`` pixels of each cell. ``(B, in_dim, gh, gw)`` NCHW to patches
    ``(B, gh * gw, patch * patch * C)``."""

    def __init__(self, in_dim: int, patch: int, width: int = 128, depth: int = 2, channels: int = 3):
        super().__init__()
        self.width, self.patch = width, patch
        self.embed = nn.Conv2d(in_dim, width, 1)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.GroupNorm(1, width), nn.Conv2d(width, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 1)
            )
            for _ in range(depth)
        )
        self.norm = nn.GroupNorm(1, width)
        self.pred = nn.Conv2d(width, patch * patch * channels, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.embed(features)
        for block in self.blocks:
            x = x + block(x)
        x = self.pred(F.gelu(self.norm(x)))
        return x.flatten(2).transpose(1, 2)


def build_decoder(kind: str, in_dim: int, patch: int, width: int, depth: int, heads: int) -> nn.Module:
    if kind == "transformer":
        return TokenDecoder(in_dim, patch, width, depth, heads)
    if kind == "conv":
        return ConvDecoder(in_dim, patch, width, depth)
    raise ValueError(f"decoder must be one of {DECODERS}, got {kind!r}")
