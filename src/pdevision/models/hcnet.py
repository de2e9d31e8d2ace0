"""HcNet: vision backbones from the heat conduction equation (Zhang & Gong, "Efficient Visual Representation
Learning with Heat Conduction Equation"). Each block mixes tokens with an explicit finite-difference step of
the anisotropic heat equation (the Heat Conduction Layer, HcL) and refines them with the Refinement
Approximation Layer (RaL, an MLP whose activation is GELU followed by a depthwise filter).

Layout: the stem is NCHW, stages run NHWC ``(B, H, W, C)`` (the HcL on an NCHW view); ``forward_features``
returns NHWC, ``forward_intermediates`` returns NCHW (timm's convention). The HcL has no resolution-dependent
parameters: any input size of at least 32x32 runs.

Two layouts (``layout=``):

- ``"library"`` (default): blocks are the shared :class:`~pdevision.layers.MixerBlock` (pre-norm, drop path,
  optional layer scale) with mixer ``Linear -> HcL -> Linear`` (:class:`~pdevision.layers.HeatConductionMixer`)
  and the RaL as its MLP; vHeat's stem (two 3x3 stride-2 convs) and downsampling (3x3 stride-2 conv + LayerNorm).
  It departs from the paper's text in three places, each this library's choice:

  1. the block adds a residual around a mixer whose heat layer already computes ``z + k (N(z) - W z)``, so the
     stream receives ``Linear_out(z + k dz)`` with ``z = Linear_in(LN(x))`` (the paper: the HcL's own ``z +``
     is the residual);
  2. ``k = sigmoid(Linear(GAP(z)))`` is computed from the normalised, projected features ``z`` rather than from
     the layer input (the paper: from ``Z^n``, the input of the HcL);
  3. the stem and downsampling are vHeat's convolutions instead of the paper's patch merging (stride 4 in the
     first stage, 2 in the others).

  The projections of (1) bring the Swin-T layout (dims 96, depths 2-2-6-2, MLP ratio 4) to 28.27M parameters,
  near the 28M the paper reports for HcNet-T (see ``hcnet_tiny``).
- ``"paper"``: follows the text where it is specific: a patch-merging stem (4x4 stride-4 conv + LayerNorm, the
  "ratio 4" patch merging) and Swin's patch merging (2x2 concatenation, LayerNorm, linear ``4C -> 2C``) between
  stages; blocks :class:`~pdevision.layers.hcl.PaperHcRaBlock`: ``x <- HcL(x)`` (the HcL's ``z +`` is the
  residual, ``k`` from the layer input ``x``), then ``x <- x + RaL(LN(x))``. Where the text is not specific
  (the paper's figures and equations were lost in extraction: norm placement, whether ``k`` is per channel,
  the head) it keeps the library's choices: LayerNorm before the RaL only, ``k`` per sample and channel, final
  LayerNorm and pooled linear head. Without the projections it has fewer parameters than the paper's 28M at the
  Swin-T layout (``hcnet_tiny(layout="paper")``: see the README's HcNet table), so the paper's model has parts its
  text does not describe.

RaL filter ablation (``ra_filter=False``): parameter-matched by default, as in the paper's Table 6 ("the same
number of parameters"): the filter-free RaL is widened to :func:`~pdevision.layers.hcl.matched_hidden` hidden
channels, so the model's parameter count stays within 0.1% of the filtered one (exact matching is impossible
with integer widths; how the paper matched it is not in its text). ``ra_filter_matched=False`` drops the filter
without widening.

The default ``parametrisation="stable"`` (``w = softplus(raw) >= 0``, ``k' = k / max(W, 1)``, so ``k' W <= 1``)
was chosen from a measurement (``benchmarks/hcnet_parametrisation.md``: ``hcnet_micro``, 200 steps on digits,
2 seeds, 2 learning rates): validation accuracy was the same within half a validation image (97.2% vs 97.3% at
lr 2e-3, 94.8% vs 94.7% at lr 1e-2), neither diverged, but the ``"paper"`` layers left the explicit scheme's
stability region (``k W`` up to 1.62, amplifying by up to 1.04 per step), which ``"stable"`` rules out by
construction. ``parametrisation="paper"`` gives the published, unconstrained form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.checkpoint
from timm.layers import LayerNorm2d
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.swin_transformer import PatchMerging
from torch import nn

from pdevision.layers import ConvDownsample, MixerBlock, run_block
from pdevision.layers.hcl import (
    DEFAULT_PARAMETRISATION,
    HeatConductionLayer,
    HeatConductionMixer,
    KMode,
    PaperHcRaBlock,
    Parametrisation,
    matched_hidden,
    refinement_act_layer,
)
from pdevision.models._staged import StagedBackbone, check_drop_path_rate, feature_cfg
from pdevision.models._weights import default_cfg, resolve_local_head
from pdevision.ops.fdm import Boundary

__all__ = ["LAYOUTS", "HcNet", "HcNetStage", "PatchStem"]

LAYOUTS: tuple[str, ...] = ("library", "paper")


class PatchStem(nn.Module):
    """The paper's first patch merging: a 4x4 stride-4 conv then LayerNorm (Swin's patch embedding); inputs are
    zero-padded on the bottom / right to a multiple of 4. NCHW in and out."""

    def __init__(self, in_chans: int, out_chans: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chans, kernel_size=4, stride=4)
        self.norm = LayerNorm2d(out_chans)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.pad(x, (0, (-x.shape[3]) % 4, 0, (-x.shape[2]) % 4))
        return self.norm(self.conv(x))


class HcNetStage(nn.Module):
    """Optional 2x downsampling, then ``depth`` Hc-Ra blocks. NHWC in and out."""

    def __init__(
        self,
        in_dim: int | None,
        dim: int,
        depth: int,
        mlp_ratio: float = 4.0,
        ra_filter: bool = True,
        post_norm: bool = False,
        layer_scale: float | None = None,
        drop_path: Sequence[float] = (),
        layout: str = "library",
        ra_filter_matched: bool = True,
        **hcl_kwargs: Any,
    ) -> None:
        super().__init__()
        self.grad_checkpointing = False
        if not ra_filter and ra_filter_matched:  # widen the filter-free RaL to the filtered one's parameters
            mlp_ratio = (matched_hidden(dim, int(dim * mlp_ratio)) + 0.5) / dim
        dpr = list(drop_path) or [0.0] * depth
        if layout == "paper":
            self.downsample = PatchMerging(in_dim, dim) if in_dim is not None else nn.Identity()
            self.blocks = nn.ModuleList(
                PaperHcRaBlock(dim, mlp_ratio, ra_filter, layer_scale, dpr[i], **hcl_kwargs) for i in range(depth)
            )
            return
        self.downsample = ConvDownsample(in_dim, dim) if in_dim is not None else nn.Identity()
        self.blocks = nn.ModuleList(
            MixerBlock(
                dim,
                HeatConductionMixer(dim, **hcl_kwargs),
                mlp_ratio=mlp_ratio,
                post_norm=post_norm,
                layer_scale=layer_scale,
                drop_path=dpr[i],
                act_layer=refinement_act_layer(dim, mlp_ratio, ra_filter),
            )
            for i in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)
        for block in self.blocks:
            x = run_block(block, x, checkpointing=self.grad_checkpointing)
        return x


class HcNet(StagedBackbone):
    """HcNet backbone: conv stem (stride 4), four stages of Hc-Ra blocks (downsampling 2x between stages,
    channels doubling), LayerNorm, pooled linear head.

    Args:
        img_size: nominal training resolution (for the default config; any input size runs).
        in_chans: input channels.
        num_classes: classifier outputs (0 for no classifier).
        global_pool: pooling of the head (timm's ``ClassifierHead``).
        depths: blocks per stage.
        dims: channels per stage, or the first stage's channels (doubled per stage).
        mlp_ratio: expansion ratio of the Refinement Approximation Layer.
        ra_filter: the RaL's depthwise filter (``False``: plain GELU MLP, the paper's ablation).
        ra_filter_matched: with ``ra_filter=False``, widen the RaL to the same parameter count (default, as the
            paper's Table 6); ``False``: drop the filter only.
        layout: ``"library"`` (default) or ``"paper"`` (see the module docstring).
        post_norm: normalise branch outputs instead of inputs.
        layer_scale: initial value of per-channel branch scaling, ``None`` for none.
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        k_mode: ``"input"`` (default), ``"learnable"`` or ``"fixed"``: the HcL step size (see
            :class:`~pdevision.layers.HeatConductionLayer`).
        k_init: the fixed ``k`` / initial learnable ``k`` (0.5).
        parametrisation: ``"stable"`` (default) or ``"paper"``.
        boundary: ``"insulated"`` (default) or ``"zeros"``.
        steps: explicit heat steps per HcL.

    Ablation arguments of the paper (``timm.create_model("hcnet_micro", **args)``): ``k_mode`` (``"fixed"``,
    ``"learnable"``, ``"input"``; Table 5), ``ra_filter`` (``True`` / ``False``, parameter-matched; Table 6),
    ``layout`` (``"library"`` / ``"paper"``), ``parametrisation`` (``"stable"`` / ``"paper"``).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        depths: Sequence[int] = (2, 2, 6, 2),
        dims: int | Sequence[int] = 96,
        mlp_ratio: float = 4.0,
        ra_filter: bool = True,
        ra_filter_matched: bool = True,
        layout: str = "library",
        post_norm: bool = False,
        layer_scale: float | None = None,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        k_mode: KMode = "input",
        k_init: float = 0.5,
        parametrisation: Parametrisation = DEFAULT_PARAMETRISATION,
        boundary: Boundary = "insulated",
        steps: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if kwargs:
            raise TypeError(f"HcNet got unexpected arguments: {sorted(kwargs)}")
        drop_path_rate = check_drop_path_rate(drop_path_rate)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if layout == "paper" and post_norm:
            raise ValueError("layout='paper' has no post-norm form (the HcL's own residual carries the stream)")
        self.layout = layout
        self._setup(img_size, in_chans, num_classes, global_pool, depths, dims)
        hcl_kwargs = dict(k_mode=k_mode, k_init=k_init, parametrisation=parametrisation, boundary=boundary, steps=steps)

        self._build(
            lambda i, in_dim, dim, depth, rates: HcNetStage(
                in_dim=in_dim,
                dim=dim,
                depth=depth,
                mlp_ratio=mlp_ratio,
                ra_filter=ra_filter,
                ra_filter_matched=ra_filter_matched,
                layout=layout,
                post_norm=post_norm,
                layer_scale=layer_scale,
                drop_path=rates,
                **hcl_kwargs,
            ),
            drop_path_rate,
            drop_rate,
        )
        if layout == "paper":
            self.stem = PatchStem(in_chans, self.dims[0])

    # -- timm model API -------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """The HcL stencil weights and learnable step sizes (small per-channel physical parameters)."""
        return {
            f"{name}.{p}"
            for name, m in self.named_modules()
            if isinstance(m, HeatConductionLayer)
            for p in ("weight", "k_logit")
            if getattr(m, p) is not None
        }


# -- registry ------------------------------------------------------------------------------------


def _create_hcnet(variant: str, pretrained: bool = False, **kwargs: Any) -> HcNet:
    out_indices = kwargs.pop("out_indices", (0, 1, 2, 3))
    kwargs = resolve_local_head(pretrained, kwargs)
    return build_model_with_cfg(
        HcNet,
        variant,
        pretrained,
        feature_cfg=feature_cfg(out_indices, kwargs),
        **kwargs,
    )


default_cfgs = generate_default_cfgs(
    {
        "hcnet_micro.untrained": default_cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        "hcnet_tiny.untrained": default_cfg(),
        "hcnet_small.untrained": default_cfg(),
        "hcnet_base.untrained": default_cfg(),
    }
)


@register_model
def hcnet_micro(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-Micro (this library's CPU-sized model): dims 32, depths 1-1-3-1, 64 px."""
    args = dict(img_size=64, dims=32, depths=(1, 1, 3, 1), drop_path_rate=0.0)
    return _create_hcnet("hcnet_micro", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_tiny(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-T: dims 96, depths 2-2-6-2, MLP ratio 4, drop path 0.1."""
    args = dict(dims=96, depths=(2, 2, 6, 2), drop_path_rate=0.1)
    return _create_hcnet("hcnet_tiny", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_small(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-S: dims 96, depths 2-2-18-2, layer scale 1e-5, drop path 0.3 (vHeat-S / Swin-S scaling)."""
    args = dict(dims=96, depths=(2, 2, 18, 2), layer_scale=1e-5, drop_path_rate=0.3)
    return _create_hcnet("hcnet_small", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_base(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-B: dims 128, depths 2-2-18-2, layer scale 1e-5, drop path 0.5 (vHeat-B / Swin-B scaling)."""
    args = dict(dims=128, depths=(2, 2, 18, 2), layer_scale=1e-5, drop_path_rate=0.5)
    return _create_hcnet("hcnet_base", pretrained, **dict(args, **kwargs))
