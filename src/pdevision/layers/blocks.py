"""Residual blocks, stems and the classifier head shared by the families; they differ only in the token mixer.

Their ``reparameterize()`` methods are inference-folding hooks: timm's ``reparameterize_model`` calls them on every
submodule that has one (as the models' own ``reparameterize`` does), so folding through timm reaches the fused
kernels too."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils.checkpoint
from timm.layers import ClassifierHead, DropPath, LayerNorm2d, LayerScale, Mlp
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.layers.fused_linear import fuse_linears
from pdevision.ops import fused


def run_block(block: nn.Module, x: torch.Tensor, *args: object, checkpointing: bool = False) -> torch.Tensor:
    """``block(x, *args)``, through activation checkpointing when asked and when gradients are recorded."""
    if checkpointing and not torch.jit.is_scripting() and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(block, x, *args, use_reentrant=False)
    return block(x, *args)


class MixerBlock(nn.Module):
    """``x + DropPath(LS(mixer(norm(x)))) + DropPath(LS(MLP(norm(x))))`` (pre-norm), or with the norms
    after the branches (post-norm, ``x + LS(norm(mixer(x)))``), as in vHeat / Swin-V2.

    Input and output: NHWC ``(B, H, W, C)``. Extra arguments of ``forward`` go to the mixer.

    ``mlp_chunk``: when set (for a token-wise MLP only), inference without autograd runs the MLP on
    chunks of at most that many tokens: the same result, with a small reused hidden buffer instead
    of a ``4 x`` wide one over the whole map (less peak memory and fewer page faults at high resolution).
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
        mlp_chunk: int | None = None,
    ) -> None:
        super().__init__()
        self.post_norm = post_norm
        self.mlp_chunk = mlp_chunk
        self.norm1 = norm_layer(dim)
        self.mixer = mixer
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        chunk = self.mlp_chunk
        if chunk is None or torch.is_grad_enabled() or is_fx_symbolic_tracing() or x.shape[1] * x.shape[2] <= chunk:
            return self.mlp(x)
        flat = x.reshape(-1, x.shape[-1])
        out = torch.empty_like(flat)
        for start in range(0, flat.shape[0], chunk):
            out[start : start + chunk] = self.mlp(flat[start : start + chunk])
        return out.reshape(x.shape)

    @torch.no_grad()
    def reparameterize(self) -> None:
        """Inference folding hook: the block's linear layers (mixer and MLP) on the fused kernels
        (:func:`~pdevision.layers.fuse_linears`: same parameters, state dict and function)."""
        fuse_linears(self)

    def forward(self, x: torch.Tensor, *args: object) -> torch.Tensor:
        if self.post_norm:
            x = x + self.drop_path1(self.ls1(self.norm1(self.mixer(x, *args))))
            return x + self.drop_path2(self.ls2(self.norm2(self._mlp(x))))
        x = x + self.drop_path1(self.ls1(self.mixer(self.norm1(x), *args)))
        return x + self.drop_path2(self.ls2(self._mlp(self.norm2(x))))


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

    @torch.no_grad()
    def reparameterize(self) -> None:
        """Inference folding hook: weights channels-last, so that its LayerNorms read NHWC memory without a copy."""
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(fused.conv2d(self.conv2, self.act(self.norm1(fused.conv2d(self.conv1, x)))))


class ConvDownsample(nn.Module):
    """3x3 stride-2 convolution (no bias) then LayerNorm: halves the resolution. NHWC in and out."""

    def __init__(self, in_chs: int, out_chs: int, norm_layer: Callable[[int], nn.Module] = nn.LayerNorm) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=2, padding=1, bias=False)
        self.norm = norm_layer(out_chs)

    @torch.no_grad()
    def reparameterize(self) -> None:
        """Inference folding hook: the convolution reads NHWC maps, so its weights go channels-last too (else the
        convolution copies them on every call)."""
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(fused.conv2d(self.conv, x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))


class FoldableClassifierHead(ClassifierHead):
    """timm's ``ClassifierHead`` (same arguments, parameters and state dict) with an inference folding hook: its
    linear layer on the fused kernels (:func:`~pdevision.layers.fuse_linears`)."""

    @torch.no_grad()
    def reparameterize(self) -> None:
        fuse_linears(self)
