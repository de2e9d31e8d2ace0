"""Residual blocks and stems shared by the families; they differ only in the token mixer."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils.checkpoint
from timm.layers import DropPath, LayerNorm2d, LayerScale, Mlp
from torch import nn


def run_block(block: nn.Module, x: torch.Tensor, *args: object, checkpointing: bool = False) -> torch.Tensor:
    """``block(x, *args)``, through activation checkpointing when asked and when gradients are recorded."""
    if checkpointing and not torch.jit.is_scripting() and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(block, x, *args, use_reentrant=False)
    return block(x, *args)


class MixerBlock(nn.Module):
    """``x + DropPath(LS(mixer(norm(x)))) + DropPath(LS(MLP(norm(x))))`` (pre-norm), or with the norms
    after the branches (post-norm, ``x + LS(norm(mixer(x)))``), as in vHeat / Swin-V2.

    Input and output: NHWC ``(B, H, W, C)``. Extra arguments of ``forward`` go to the mixer.
    """

    def __init__(
        self,
        dim: int,
        mixer: nn.Module,
        mlp_ratio: float = 4.0,
        post_norm: bool = False,
        layer_scale: float | None = None,
        drop_path: float = 0.0,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        act_layer: Callable[[], nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        self.post_norm = post_norm
        self.norm1 = norm_layer(dim)
        self.mixer = mixer
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor, *args: object) -> torch.Tensor:
        if self.post_norm:
            x = x + self.drop_path1(self.ls1(self.norm1(self.mixer(x, *args))))
            return x + self.drop_path2(self.ls2(self.norm2(self.mlp(x))))
        x = x + self.drop_path1(self.ls1(self.mixer(self.norm1(x), *args)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class ConvStem(nn.Module):
    """Two 3x3 stride-2 convolutions with LayerNorm and GELU (stride 4), as in vHeat / InternImage.

    Input and output: NCHW.
    """

    def __init__(self, in_chans: int, out_chans: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, out_chans // 2, kernel_size=3, stride=2, padding=1)
        self.norm1 = LayerNorm2d(out_chans // 2, eps=eps)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(out_chans // 2, out_chans, kernel_size=3, stride=2, padding=1)
        self.norm2 = LayerNorm2d(out_chans, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.conv2(self.act(self.norm1(self.conv1(x)))))


class ConvDownsample(nn.Module):
    """3x3 stride-2 convolution (no bias) then LayerNorm: halves the resolution. NHWC in and out."""

    def __init__(self, in_chs: int, out_chs: int, norm_layer: Callable[[int], nn.Module] = nn.LayerNorm) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=2, padding=1, bias=False)
        self.norm = norm_layer(out_chs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))
