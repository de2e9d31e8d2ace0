"""HcNet: vision backbones from the heat conduction equation (Zhang & Gong, "Efficient Visual Representation
Learning with Heat Conduction Equation").

``hcnet_*`` is the network of the authors' released code (github ZheminZhang1/HcNet, ``HcNet.py``, commit 14c9a8a;
``layout="authors"``, the default), NCHW throughout: their stem, blocks :class:`~pdevision.layers.hcl.HcRaBlock`
(``x <- x + alpha (mean_8(x) - x)``, ``alpha = sigmoid(Conv1x1(GAP(x)))``, then ``x <- x + RaL(GroupNorm(x))``),
their downsampling, ``GroupNorm(1, C)``, pooled linear head and their initialisation. The neighbour count of
``mean_8`` is computed from the input, so any input size of at least 32x32 runs (their buffer fixes one size).
:func:`checkpoint_filter_fn` loads their state dicts; the fixtures and tests hold counts and logits equal to theirs
(docs/hcnet.md). ``hcnet_authors_default`` and ``hcnet_authors_main`` are the two configurations of their file;
``hcnet_tiny`` is a layout within their architecture found for the paper's HcNet-T figures, ``hcnet_small`` and
``hcnet_base`` are this library's choice (the paper's text gives no size for them).

The library's earlier reconstructions from the paper's text stay available as ``layout="library"`` and
``layout="paper"`` (stages NHWC ``(B, H, W, C)``, the HcL on an NCHW view; ``forward_features`` returns NHWC,
``forward_intermediates`` NCHW, timm's convention):

The two reconstructions:

- ``"library"``: blocks are the shared :class:`~pdevision.layers.MixerBlock` (pre-norm, drop path,
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
  near the 28M the paper reports for HcNet-T (``hcnet_tiny(layout="library", dims=96, depths=(2, 2, 6, 2))``).
- ``"paper"``: follows the text where it is specific: a patch-merging stem (4x4 stride-4 conv + LayerNorm, the
  "ratio 4" patch merging) and Swin's patch merging (2x2 concatenation, LayerNorm, linear ``4C -> 2C``) between
  stages; blocks :class:`~pdevision.layers.hcl.PaperHcRaBlock`: ``x <- HcL(x)`` (the HcL's ``z +`` is the
  residual, ``k`` from the layer input ``x``), then ``x <- x + RaL(LN(x))``. Where the text is not specific
  (the paper's figures and equations were lost in extraction: norm placement, whether ``k`` is per channel,
  the head) it keeps the library's choices: LayerNorm before the RaL only, ``k`` per sample and channel, final
  LayerNorm and pooled linear head. Without the projections it has fewer parameters than the paper's 28M at the
  Swin-T layout (21.97M at dims 96, depths 2-2-6-2).

RaL filter ablation (``ra_filter=False``): parameter-matched by default, as in the paper's Table 6 ("the same
number of parameters"): the filter-free RaL is widened to :func:`~pdevision.layers.hcl.matched_hidden` hidden
channels (:func:`~pdevision.layers.hcl.authors_matched_hidden` for the authors' bias-free filter), so the model's
parameter count stays within 0.1% of the filtered one (exact matching is impossible with integer widths; how the
paper matched it is in neither its text nor the authors' code). ``ra_filter_matched=False`` drops the filter
without widening.

The library layouts' default ``parametrisation="stable"`` (``w = softplus(raw) >= 0``, ``k' = k / max(W, 1)``, so
``k' W <= 1``) was chosen from a measurement (``benchmarks/hcnet_parametrisation.md``: ``hcnet_micro`` in the library
layout, 200 steps on digits, 2 seeds, 2 learning rates): validation accuracy was the same within half a validation
image (97.2% vs 97.3% at lr 2e-3, 94.8% vs 94.7% at lr 1e-2), neither diverged, but the ``"paper"`` layers left the
explicit scheme's stability region (``k W`` up to 1.62, amplifying by up to 1.04 per step), which ``"stable"`` rules
out by construction. ``parametrisation="paper"`` gives the published, unconstrained form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.checkpoint
from timm.layers import ClassifierHead, LayerNorm2d, calculate_drop_path_rates
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.swin_transformer import PatchMerging
from torch import nn

from pdevision.layers import ConvDownsample, ConvStem, MixerBlock, run_block
from pdevision.layers.hcl import (
    DEFAULT_PARAMETRISATION,
    GroupNorm1,
    HcDownsample,
    HcRaBlock,
    HcStem,
    HeatConductionLayer,
    HeatConductionMixer,
    KMode,
    NeighbourMeanHeat,
    PaperHcRaBlock,
    Parametrisation,
    matched_hidden,
    refinement_act_layer,
)
from pdevision.models._staged import StagedBackbone, check_drop_path_rate, feature_cfg, to_2tuple_size
from pdevision.models._weights import default_cfg, resolve_local_head, unwrap_state_dict
from pdevision.ops.fdm import Boundary

__all__ = ["LAYOUTS", "HcNet", "HcNetStage", "PatchStem", "checkpoint_filter_fn"]

LAYOUTS: tuple[str, ...] = ("authors", "library", "paper")
# options of the library's reconstructions only (the authors' block has no stencil weights, norm choice or scale)
_LIBRARY_OPTIONS = ("parametrisation", "boundary", "steps", "post_norm", "layer_scale")


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
    """Optional 2x downsampling, then ``depth`` Hc-Ra blocks. NCHW in and out for ``layout="authors"``
    (:class:`~pdevision.layers.hcl.HcRaBlock`), NHWC for the library's layouts."""

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
        dpr = list(drop_path) or [0.0] * depth
        if layout == "authors":
            kw = {k: v for k, v in hcl_kwargs.items() if k in ("k_mode", "k_init")}
            self.downsample = HcDownsample(in_dim, dim) if in_dim is not None else nn.Identity()
            self.blocks = nn.ModuleList(
                HcRaBlock(dim, mlp_ratio, dpr[i], ra_filter=ra_filter, ra_filter_matched=ra_filter_matched, **kw)
                for i in range(depth)
            )
            return
        if not ra_filter and ra_filter_matched:  # widen the filter-free RaL to the filtered one's parameters
            mlp_ratio = (matched_hidden(dim, int(dim * mlp_ratio)) + 0.5) / dim
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


# the stem of each layout: the authors' conv stem, vHeat's two stride-2 convs, the paper's 4x4 patch merging
_STEMS: dict[str, type[nn.Module]] = {"authors": HcStem, "library": ConvStem, "paper": PatchStem}


def _check_layout_options(
    layout: str,
    parametrisation: Parametrisation | None,
    boundary: Boundary | None,
    steps: int | None,
    post_norm: bool | None,
    layer_scale: float | None,
) -> None:
    """``ValueError`` for an unknown layout or an option its blocks do not have."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    library = dict(parametrisation=parametrisation, boundary=boundary, steps=steps)
    library.update(post_norm=post_norm, layer_scale=layer_scale)
    if layout == "authors":
        given = sorted(k for k, v in library.items() if v is not None and v is not False)
        if given:
            raise ValueError(f"{', '.join(given)}: options of layout='library' / 'paper', not of layout='authors'")
    if layout == "paper" and post_norm:
        raise ValueError("layout='paper' has no post-norm form (the HcL's own residual carries the stream)")


class HcNet(StagedBackbone):
    """HcNet backbone: stem (stride 4), four stages of Hc-Ra blocks (downsampling 2x between stages), norm, pooled
    linear head.

    Args:
        img_size: nominal training resolution (for the default config; any input size runs).
        in_chans: input channels.
        num_classes: classifier outputs (0 for no classifier).
        global_pool: pooling of the head (timm's ``ClassifierHead``).
        depths: blocks per stage.
        dims: channels per stage, or the first stage's channels (doubled per stage).
        mlp_ratio: expansion ratio of the Refinement Approximation Layer.
        ra_filter: the RaL's depthwise filter (``False``: no filter, the paper's Table 6 ablation).
        ra_filter_matched: with ``ra_filter=False``, widen the RaL to the same parameter count (default, as the
            paper's Table 6); ``False``: drop the filter only.
        layout: ``"authors"`` (default: the authors' released ``HcNet.py``), ``"library"`` or ``"paper"`` (this
            library's earlier reconstructions from the paper's text; see the module docstring).
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        k_mode: ``"input"`` (default), ``"learnable"`` or ``"fixed"``: how the heat step size is set (the paper's
            Table 5; :class:`~pdevision.layers.hcl.NeighbourMeanHeat`, or
            :class:`~pdevision.layers.HeatConductionLayer` in the library's layouts).
        k_init: the fixed ``k`` / initial learnable ``k`` (0.5).
        parametrisation: library layouts only: ``"stable"`` (their default) or ``"paper"``.
        boundary: library layouts only: ``"insulated"`` (their default) or ``"zeros"``.
        steps: library layouts only: explicit heat steps per HcL (1).
        post_norm: library layout only: normalise branch outputs instead of inputs.
        layer_scale: library layouts only: initial value of per-channel branch scaling, ``None`` for none.

    Ablation arguments of the paper (``timm.create_model("hcnet_micro", **args)``): ``k_mode`` (``"fixed"``,
    ``"learnable"``, ``"input"``; Table 5), ``ra_filter`` (``True`` / ``False``, parameter-matched; Table 6).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        depths: Sequence[int] = (2, 2, 6, 2),
        dims: int | Sequence[int] = (64, 128, 320, 512),
        mlp_ratio: float = 4.0,
        ra_filter: bool = True,
        ra_filter_matched: bool = True,
        layout: str = "authors",
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        k_mode: KMode = "input",
        k_init: float = 0.5,
        parametrisation: Parametrisation | None = None,
        boundary: Boundary | None = None,
        steps: int | None = None,
        post_norm: bool | None = None,
        layer_scale: float | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"HcNet got unexpected arguments: {sorted(kwargs)}")
        drop_path_rate = check_drop_path_rate(drop_path_rate)
        _check_layout_options(layout, parametrisation, boundary, steps, post_norm, layer_scale)
        for name, flag in (("ra_filter", ra_filter), ("ra_filter_matched", ra_filter_matched)):
            if not isinstance(flag, bool):  # the string "false" is true: the filter would be kept without a word
                raise ValueError(f"{name} must be true or false, got {flag!r:.40}")
        authors = layout == "authors"  # the authors' network runs NCHW throughout
        super().__init__(in_chans, num_classes, global_pool, depths, dims, output_fmt="NCHW" if authors else "NHWC")
        self.layout = layout
        self.img_size = to_2tuple_size(img_size)
        dpr = calculate_drop_path_rates(drop_path_rate, self.depths, stagewise=True)
        hcl_kwargs = dict(
            k_mode=k_mode,
            k_init=k_init,
            parametrisation=parametrisation or DEFAULT_PARAMETRISATION,
            boundary=boundary or "insulated",
            steps=1 if steps is None else steps,
        )

        self.stem = _STEMS[layout](in_chans, self.dims[0])
        self.stages = nn.ModuleList(
            HcNetStage(
                in_dim=self.dims[i - 1] if i > 0 else None,
                dim=self.dims[i],
                depth=self.depths[i],
                mlp_ratio=mlp_ratio,
                ra_filter=ra_filter,
                ra_filter_matched=ra_filter_matched,
                layout=layout,
                post_norm=bool(post_norm),
                layer_scale=layer_scale,
                drop_path=dpr[i],
                **hcl_kwargs,
            )
            for i in range(len(self.depths))
        )
        self.norm = GroupNorm1(self.num_features) if authors else nn.LayerNorm(self.num_features)
        self.head = ClassifierHead(
            self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate, input_fmt=self.output_fmt
        )
        if authors:  # the authors' blocks initialise themselves; only the head here
            self.head.apply(self.init_linear)
        else:
            self.apply(self.init_linear)

    # -- timm model API -------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """The HcL stencil weights and learnable step sizes (small per-channel physical parameters)."""
        return {
            f"{name}.{p}"
            for name, m in self.named_modules()
            if isinstance(m, (HeatConductionLayer, NeighbourMeanHeat))
            for p in ("weight", "k_logit")
            if getattr(m, p, None) is not None
        }


# -- the authors' checkpoints --------------------------------------------------------------------

_AUTHOR_KEYS = (
    (r"^patch_embed\.", "stem."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.fc_0\.", r"stages.\1.blocks.\2.heat.k_proj."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.", r"stages.\1.blocks.\2."),
    (r"^head\.", "head.fc."),
)


def _map_author_key(key: str) -> str | None:
    """This library's name of a key of the authors' ``HcNet`` (``None``: the neighbour-count buffers ``mean_num``,
    which here follow the input size)."""
    if key.endswith(".mean_num"):
        return None
    m = re.match(r"^layers\.(\d+)\.downsample\.(reduction|norm)\.(.*)$", key)
    if m:  # their stage i ends with the downsampling that begins stage i + 1 here
        part = "conv" if m.group(2) == "reduction" else "norm"
        return f"stages.{int(m.group(1)) + 1}.downsample.{part}.{m.group(3)}"
    for pattern, repl in _AUTHOR_KEYS:
        if re.match(pattern, key):
            return re.sub(pattern, repl, key)
    return key


def checkpoint_filter_fn(state_dict: dict[str, Any], model: HcNet) -> dict[str, torch.Tensor]:
    """Convert a checkpoint of the authors' ``HcNet.py`` (``patch_embed.*``, ``layers.<i>.blocks.<j>.*``,
    ``layers.<i>.downsample.*``, ``head.*``; alone or inside ``model`` / ``model_ema`` / ``state_dict``, with or
    without DDP's ``module.``) to this model's names; this library's own state dicts pass unchanged."""
    del model
    state_dict = unwrap_state_dict(state_dict)
    if not any(k.startswith(("patch_embed.", "layers.")) for k in state_dict):
        return state_dict
    converted = {}
    for key, value in state_dict.items():
        mapped = _map_author_key(key)
        if mapped is not None:
            converted[mapped] = value
    return converted


# -- registry ------------------------------------------------------------------------------------


def _create_hcnet(variant: str, pretrained: bool = False, **kwargs: Any) -> HcNet:
    out_indices = kwargs.pop("out_indices", (0, 1, 2, 3))
    kwargs = resolve_local_head(pretrained, kwargs)
    return build_model_with_cfg(
        HcNet,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=feature_cfg(out_indices, kwargs),
        **kwargs,
    )


default_cfgs = generate_default_cfgs(
    {
        "hcnet_micro.untrained": default_cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        "hcnet_authors_default.untrained": default_cfg(),
        "hcnet_authors_main.untrained": default_cfg(),
        "hcnet_tiny.untrained": default_cfg(),
        "hcnet_small.untrained": default_cfg(),
        "hcnet_base.untrained": default_cfg(),
    }
)

_AUTHOR_WIDTHS = (64, 128, 320, 512)  # the only widths in the authors' file


@register_model
def hcnet_micro(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-Micro (this library's CPU-sized model for tests and demos): the authors' architecture at widths
    32-64-128-256, depths 1-1-3-1, 64 px."""
    args = dict(img_size=64, dims=32, depths=(1, 1, 3, 1), drop_path_rate=0.0)
    return _create_hcnet("hcnet_micro", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_authors_default(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """The authors' ``HcNet`` class with its default arguments: widths 64-128-320-512, depths 2-2-6-2, drop path
    0.1 (13.21M parameters, 1.89 GMACs at 224 px)."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(2, 2, 6, 2), drop_path_rate=0.1)
    return _create_hcnet("hcnet_authors_default", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_authors_main(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """The model built by the ``__main__`` of the authors' ``HcNet.py``: widths 64-128-320-512, depths 4-4-12-4,
    drop path 0.2 (23.97M parameters, 3.51 GMACs at 224 px)."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(4, 4, 12, 4), drop_path_rate=0.2)
    return _create_hcnet("hcnet_authors_main", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_tiny(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-T by search, not the paper's (lost) Table 1: the authors' architecture and widths 64-128-320-512,
    depths 4-4-16-4, drop path 0.1: 27.71M parameters and 4.16 GMACs at 224 px against the paper's 28M and 4.1G.
    Of the layouts ``a-a-b-a`` (the form of both layouts in the authors' file) it is the one nearest to both
    figures (largest relative difference 1.4%); docs/hcnet.md gives the search."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(4, 4, 16, 4), drop_path_rate=0.1)
    return _create_hcnet("hcnet_tiny", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_small(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-S, this library's choice (the paper's text gives no size for S): the authors' architecture with
    PoolFormer-S36's layout (widths 64-128-320-512, depths 6-6-18-6; the authors' two layouts are PoolFormer-S12's
    and -S24's), drop path 0.2: 34.73M parameters, 5.13 GMACs at 224 px."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(6, 6, 18, 6), drop_path_rate=0.2)
    return _create_hcnet("hcnet_small", pretrained, **dict(args, **kwargs))


@register_model
def hcnet_base(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-B, this library's choice (the paper's text gives no size for B): the authors' architecture with
    PoolFormer-M36's layout (widths 96-192-384-768, depths 6-6-18-6), drop path 0.3: 63.10M parameters,
    9.02 GMACs at 224 px."""
    args = dict(dims=(96, 192, 384, 768), depths=(6, 6, 18, 6), drop_path_rate=0.3)
    return _create_hcnet("hcnet_base", pretrained, **dict(args, **kwargs))
