"""HcNet: vision backbones from the heat conduction equation (Zhang & Gong, "Efficient Visual Representation
Learning with Heat Conduction Equation").

:class:`HcNet` (``hcnet_*``) is the network of the authors' released code (github ZheminZhang1/HcNet, ``HcNet.py``,
commit 14c9a8a), NCHW throughout: their stem, blocks :class:`~pdevision.layers.hcl.HcRaBlock`
(``x <- x + alpha (mean_8(x) - x)``, ``alpha = sigmoid(Conv1x1(GAP(x)))``, then ``x <- x + RaL(GroupNorm(x))``),
their downsampling, ``GroupNorm(1, C)``, pooled linear head and their initialisation. The neighbour count of
``mean_8`` is computed from the input, so any input size of at least 32x32 runs (their buffer fixes one size).
:func:`checkpoint_filter_fn` loads their state dicts; the fixtures and tests hold counts and logits equal to theirs
(docs/hcnet.md). ``hcnet_authors_default`` and ``hcnet_authors_main`` are the two configurations of their file;
``hcnet_tiny`` is a layout within their architecture found for the paper's HcNet-T figures, ``hcnet_small`` and
``hcnet_base`` are this library's choice (the paper's text gives no size for them).

The library's two earlier reconstructions from the paper's text are variants of their own (``hcnet_library_*``,
``hcnet_paper_*``; stages NHWC ``(B, H, W, C)``, the HcL on an NCHW view; ``forward_features`` returns NHWC,
``forward_intermediates`` NCHW, timm's convention). Each subclass replaces the stem, downsampling, block and norm
of :class:`HcNet`; the layers are shared (:mod:`pdevision.layers.hcl`):

- :class:`HcNetLibrary`: blocks are the shared :class:`~pdevision.layers.MixerBlock` (pre-norm, drop path,
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
  near the 28M the paper reports for HcNet-T (``hcnet_library_tiny``, the library's earlier ``hcnet_tiny``).
- :class:`HcNetPaper`: follows the text where it is specific: a patch-merging stem (4x4 stride-4 conv + LayerNorm,
  the "ratio 4" patch merging) and Swin's patch merging (2x2 concatenation, LayerNorm, linear ``4C -> 2C``) between
  stages; blocks :class:`~pdevision.layers.hcl.PaperHcRaBlock`: ``x <- HcL(x)`` (the HcL's ``z +`` is the
  residual, ``k`` from the layer input ``x``), then ``x <- x + RaL(LN(x))``. Where the text is not specific
  (the paper's figures and equations were lost in extraction: norm placement, whether ``k`` is per channel,
  the head) it keeps the library's choices: LayerNorm before the RaL only, ``k`` per sample and channel, final
  LayerNorm and pooled linear head. Without the projections it has fewer parameters than the paper's 28M at the
  Swin-T layout (21.97M at dims 96, depths 2-2-6-2, ``hcnet_paper_tiny``).

RaL filter ablation (``ra_filter=False``): parameter-matched by default, as in the paper's Table 6 ("the same
number of parameters"): the filter-free RaL is widened to :func:`~pdevision.layers.hcl.matched_hidden` hidden
channels (:func:`~pdevision.layers.hcl.authors_matched_hidden` for the authors' bias-free filter), so the model's
parameter count stays within 0.1% of the filtered one (exact matching is impossible with integer widths; how the
paper matched it is in neither its text nor the authors' code). ``ra_filter_matched=False`` drops the filter
without widening.

The reconstructions' default ``parametrisation="stable"`` (``w = softplus(raw) >= 0``, ``k' = k / max(W, 1)``, so
``k' W <= 1``) was chosen from a measurement (``benchmarks/hcnet_parametrisation``: ``hcnet_library_micro``,
200 steps on digits, 2 seeds, 2 learning rates): validation accuracy was the same within half a validation
image (97.2% vs 97.3% at lr 2e-3, 94.8% vs 94.7% at lr 1e-2), neither diverged, but the ``"paper"`` layers left the
explicit scheme's stability region (``k W`` up to 1.62, amplifying by up to 1.04 per step), which ``"stable"`` rules
out by construction. ``parametrisation="paper"`` gives the published, unconstrained form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch
import torch.utils.checkpoint
from timm.layers import ClassifierHead, LayerNorm2d, calculate_drop_path_rates
from timm.models import generate_default_cfgs, register_model
from timm.models.swin_transformer import PatchMerging
from torch import nn

from pdevision.layers import ConvDownsample, ConvStem, MixerBlock, run_block
from pdevision.layers.hcl import (
    GroupNorm1,
    HcDownsample,
    HcRaBlock,
    HcStem,
    HeatConductionLayer,
    HeatConductionMixer,
    KMode,
    NeighbourMeanHeat,
    PaperHcRaBlock,
    matched_hidden,
    refinement_act_layer,
)
from pdevision.models._arguments import check_rate
from pdevision.models._staged import StagedBackbone, create_staged, to_2tuple_size
from pdevision.models._weights import default_cfg, unwrap_state_dict

__all__ = ["HcNet", "HcNetLibrary", "HcNetPaper", "HcNetStage", "PatchStem", "checkpoint_filter_fn"]

# the retired ``layout`` argument of ``hcnet_*`` and the options of its earlier layouts, and what their user reads
_MOVED_OPTIONS = {"layout", "parametrisation", "boundary", "steps", "post_norm", "layer_scale"}
_LAYOUT_MOVED = (
    "the layouts 'library' and 'paper' are the models hcnet_library_* and hcnet_paper_*, whose classes take "
    "parametrisation, boundary, steps, post_norm and layer_scale (docs/hcnet.md)"
)


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
    """A downsampling module (``nn.Identity`` in the first stage), then Hc-Ra blocks, in the layout of its
    modules (NCHW for :class:`HcNet`, NHWC for the reconstructions)."""

    def __init__(self, downsample: nn.Module, blocks: Iterable[nn.Module]) -> None:
        super().__init__()
        self.grad_checkpointing = False
        self.downsample = downsample
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)
        for block in self.blocks:
            x = run_block(block, x, checkpointing=self.grad_checkpointing)
        return x


class HcNet(StagedBackbone):
    """HcNet backbone, the authors' network: stem (stride 4), four stages of Hc-Ra blocks (downsampling 2x between
    stages), ``GroupNorm(1, C)``, pooled linear head. NCHW throughout.

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
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        k_mode: ``"input"`` (default), ``"learnable"`` or ``"fixed"``: how the heat step size is set (the paper's
            Table 5; :class:`~pdevision.layers.hcl.NeighbourMeanHeat`).
        k_init: the fixed ``k`` / initial learnable ``k`` (0.5).
        **block_options: the options of a subclass's blocks (:attr:`block_options`; none here).

    Ablation arguments of the paper (``timm.create_model("hcnet_micro", **args)``): ``k_mode`` (``"fixed"``,
    ``"learnable"``, ``"input"``; Table 5), ``ra_filter`` (``True`` / ``False``, parameter-matched; Table 6).

    A variant replaces the class attributes ``stem_layer``, ``downsample_layer``, ``norm_layer``, ``stage_fmt``
    and :attr:`block_options`, and the methods :meth:`make_block` and :meth:`init_weights`.
    """

    stem_layer: ClassVar[type[nn.Module]] = HcStem
    downsample_layer: ClassVar[type[nn.Module]] = HcDownsample
    norm_layer: ClassVar[type[nn.Module]] = GroupNorm1
    #: the layout the stages run in
    stage_fmt: ClassVar[str] = "NCHW"
    #: keyword arguments passed on to :meth:`make_block` (the authors' block has none beyond the shared ones)
    block_options: ClassVar[tuple[str, ...]] = ()

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
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        k_mode: KMode = "input",
        k_init: float = 0.5,
        **block_options: Any,
    ) -> None:
        unknown = sorted(set(block_options) - set(self.block_options))
        if unknown:
            hint = f" ({_LAYOUT_MOVED})" if not self.block_options and _MOVED_OPTIONS & set(unknown) else ""
            raise TypeError(f"{type(self).__name__} got unexpected keyword argument(s): {unknown}{hint}")
        drop_path_rate = check_rate(drop_path_rate)
        for name, flag in (("ra_filter", ra_filter), ("ra_filter_matched", ra_filter_matched)):
            if not isinstance(flag, bool):  # the string "false" is true: the filter would be kept without a word
                raise ValueError(f"{name} must be true or false, got {flag!r:.40}")
        super().__init__(in_chans, num_classes, global_pool, depths, dims, output_fmt=self.stage_fmt)
        self.img_size = to_2tuple_size(img_size)
        dpr = calculate_drop_path_rates(drop_path_rate, self.depths, stagewise=True)
        shared = dict(k_mode=k_mode, k_init=k_init, ra_filter=ra_filter, ra_filter_matched=ra_filter_matched)
        self.stem = self.stem_layer(in_chans, self.dims[0])
        self.stages = nn.ModuleList(
            HcNetStage(
                self.downsample_layer(self.dims[i - 1], dim) if i > 0 else nn.Identity(),
                (self.make_block(dim, mlp_ratio, rate, **shared, **block_options) for rate in dpr[i]),
            )
            for i, dim in enumerate(self.dims)
        )
        self.norm = self.norm_layer(self.num_features)
        self.head = ClassifierHead(
            self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate, input_fmt=self.output_fmt
        )
        self.init_weights()

    def make_block(self, dim: int, mlp_ratio: float, drop_path: float, **options: Any) -> nn.Module:
        """One Hc-Ra block of width ``dim``: the authors' :class:`~pdevision.layers.hcl.HcRaBlock`."""
        return HcRaBlock(dim, mlp_ratio, drop_path, **options)

    def init_weights(self) -> None:
        """The authors' initialisation: their blocks initialise themselves; the head here."""
        self.head.apply(self.init_linear)

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


def library_block(
    dim: int,
    mlp_ratio: float = 4.0,
    ra_filter: bool = True,
    drop_path: float = 0.0,
    post_norm: bool = False,
    layer_scale: float | None = None,
    **hcl_options: Any,
) -> MixerBlock:
    """The library's Hc-Ra block: a :class:`~pdevision.layers.MixerBlock` with the mixer
    :class:`~pdevision.layers.HeatConductionMixer` (``hcl_options`` go to its HcL) and the RaL as MLP. NHWC."""
    return MixerBlock(
        dim,
        HeatConductionMixer(dim, **hcl_options),
        mlp_ratio=mlp_ratio,
        post_norm=post_norm,
        layer_scale=layer_scale,
        drop_path=drop_path,
        act_layer=refinement_act_layer(dim, mlp_ratio, ra_filter),
    )


class HcNetLibrary(HcNet):
    """HcNet as this library first reconstructed it from the paper's text (``hcnet_library_*``; see the module
    docstring): vHeat's stem and downsampling, :class:`~pdevision.layers.MixerBlock` blocks with the mixer
    ``Linear -> HcL -> Linear`` and the RaL as MLP, LayerNorm. Stages run NHWC.

    Takes :class:`HcNet`'s arguments and, as keywords, the options of its HcL and blocks: ``parametrisation``,
    ``"stable"`` (default) or ``"paper"`` (:class:`~pdevision.layers.HeatConductionLayer`); ``boundary``,
    ``"insulated"`` (default) or ``"zeros"``; ``steps``, explicit heat steps per HcL (1); ``post_norm``, normalise
    branch outputs instead of inputs (``False``); ``layer_scale``, the initial value of per-channel branch scaling,
    ``None`` (default) for none.
    """

    stem_layer = ConvStem
    downsample_layer = ConvDownsample
    norm_layer = nn.LayerNorm
    stage_fmt = "NHWC"
    block_options = ("parametrisation", "boundary", "steps", "post_norm", "layer_scale")

    #: the block, called as ``block_layer(dim, mlp_ratio=, ra_filter=, drop_path=, **options)``
    block_layer: ClassVar[Callable[..., nn.Module]] = staticmethod(library_block)

    def make_block(
        self, dim: int, mlp_ratio: float, drop_path: float, ra_filter: bool, ra_filter_matched: bool, **options: Any
    ) -> nn.Module:
        """One block of :attr:`block_layer`; without the RaL filter and ``ra_filter_matched``, its RaL widened to
        the filtered one's parameters (:func:`~pdevision.layers.hcl.matched_hidden`)."""
        if not ra_filter and ra_filter_matched:
            mlp_ratio = (matched_hidden(dim, int(dim * mlp_ratio)) + 0.5) / dim
        return self.block_layer(dim, mlp_ratio=mlp_ratio, ra_filter=ra_filter, drop_path=drop_path, **options)

    def init_weights(self) -> None:
        """Truncated-normal linear weights and zero biases everywhere (timm's, as vHeat)."""
        self.apply(self.init_linear)


class HcNetPaper(HcNetLibrary):
    """HcNet as the paper's text describes it where it is specific (``hcnet_paper_*``; see the module docstring):
    the 4x4 patch-merging stem, Swin's patch merging, :class:`~pdevision.layers.hcl.PaperHcRaBlock` (the HcL on the
    stream itself, then the RaL), LayerNorm. Stages run NHWC. Takes :class:`HcNetLibrary`'s options but
    ``post_norm`` (the HcL's own residual carries the stream)."""

    stem_layer = PatchStem
    downsample_layer = PatchMerging
    block_options = ("parametrisation", "boundary", "steps", "layer_scale")

    block_layer = PaperHcRaBlock


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

default_cfgs = generate_default_cfgs(
    {
        "hcnet_micro.untrained": default_cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        "hcnet_authors_default.untrained": default_cfg(),
        "hcnet_authors_main.untrained": default_cfg(),
        "hcnet_tiny.untrained": default_cfg(),
        "hcnet_small.untrained": default_cfg(),
        "hcnet_base.untrained": default_cfg(),
        "hcnet_library_micro.untrained": default_cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        "hcnet_library_tiny.untrained": default_cfg(),
        "hcnet_paper_micro.untrained": default_cfg(
            input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0, first_conv="stem.conv"
        ),
        "hcnet_paper_tiny.untrained": default_cfg(first_conv="stem.conv"),
    }
)

_AUTHOR_WIDTHS = (64, 128, 320, 512)  # the only widths in the authors' file
_MICRO = dict(img_size=64, dims=32, depths=(1, 1, 3, 1), drop_path_rate=0.0)  # this library's CPU size
_SWIN_T = dict(dims=96, depths=(2, 2, 6, 2), drop_path_rate=0.1)  # the reconstructions' HcNet-T


@register_model
def hcnet_micro(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-Micro (this library's CPU-sized model for tests and demos): the authors' architecture at widths
    32-64-128-256, depths 1-1-3-1, 64 px."""
    return create_staged(HcNet, "hcnet_micro", pretrained, checkpoint_filter_fn, **{**_MICRO, **kwargs})


@register_model
def hcnet_authors_default(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """The authors' ``HcNet`` class with its default arguments: widths 64-128-320-512, depths 2-2-6-2, drop path
    0.1 (13.21M parameters, 1.89 GMACs at 224 px)."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(2, 2, 6, 2), drop_path_rate=0.1)
    return create_staged(HcNet, "hcnet_authors_default", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def hcnet_authors_main(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """The model built by the ``__main__`` of the authors' ``HcNet.py``: widths 64-128-320-512, depths 4-4-12-4,
    drop path 0.2 (23.97M parameters, 3.51 GMACs at 224 px)."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(4, 4, 12, 4), drop_path_rate=0.2)
    return create_staged(HcNet, "hcnet_authors_main", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def hcnet_tiny(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-T by search, not the paper's (lost) Table 1: the authors' architecture and widths 64-128-320-512,
    depths 4-4-16-4, drop path 0.1: 27.71M parameters and 4.16 GMACs at 224 px against the paper's 28M and 4.1G.
    Of the layouts ``a-a-b-a`` (the form of both layouts in the authors' file) it is the one nearest to both
    figures (largest relative difference 1.4%); docs/hcnet.md gives the search."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(4, 4, 16, 4), drop_path_rate=0.1)
    return create_staged(HcNet, "hcnet_tiny", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def hcnet_small(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-S, this library's choice (the paper's text gives no size for S): the authors' architecture with
    PoolFormer-S36's layout (widths 64-128-320-512, depths 6-6-18-6; the authors' two layouts are PoolFormer-S12's
    and -S24's), drop path 0.2: 34.73M parameters, 5.13 GMACs at 224 px."""
    args = dict(dims=_AUTHOR_WIDTHS, depths=(6, 6, 18, 6), drop_path_rate=0.2)
    return create_staged(HcNet, "hcnet_small", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def hcnet_base(pretrained: bool = False, **kwargs: Any) -> HcNet:
    """HcNet-B, this library's choice (the paper's text gives no size for B): the authors' architecture with
    PoolFormer-M36's layout (widths 96-192-384-768, depths 6-6-18-6), drop path 0.3: 63.10M parameters,
    9.02 GMACs at 224 px."""
    args = dict(dims=(96, 192, 384, 768), depths=(6, 6, 18, 6), drop_path_rate=0.3)
    return create_staged(HcNet, "hcnet_base", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def hcnet_library_micro(pretrained: bool = False, **kwargs: Any) -> HcNetLibrary:
    """The library's earlier reconstruction (:class:`HcNetLibrary`) at the micro size: dims 32, depths 1-1-3-1,
    64 px (the ``hcnet_micro`` of the recorded ablations and of ``benchmarks/hcnet_parametrisation.md``)."""
    return create_staged(HcNetLibrary, "hcnet_library_micro", pretrained, checkpoint_filter_fn, **{**_MICRO, **kwargs})


@register_model
def hcnet_library_tiny(pretrained: bool = False, **kwargs: Any) -> HcNetLibrary:
    """The library's earlier ``hcnet_tiny`` (:class:`HcNetLibrary`): Swin-T's layout, dims 96, depths 2-2-6-2,
    drop path 0.1 (28.27M parameters, 4.07 GMACs at 224 px)."""
    return create_staged(HcNetLibrary, "hcnet_library_tiny", pretrained, checkpoint_filter_fn, **{**_SWIN_T, **kwargs})


@register_model
def hcnet_paper_micro(pretrained: bool = False, **kwargs: Any) -> HcNetPaper:
    """The reconstruction that follows the paper's text (:class:`HcNetPaper`) at the micro size: dims 32, depths
    1-1-3-1, 64 px."""
    return create_staged(HcNetPaper, "hcnet_paper_micro", pretrained, checkpoint_filter_fn, **{**_MICRO, **kwargs})


@register_model
def hcnet_paper_tiny(pretrained: bool = False, **kwargs: Any) -> HcNetPaper:
    """The reconstruction that follows the paper's text (:class:`HcNetPaper`) at Swin-T's layout: dims 96, depths
    2-2-6-2, drop path 0.1 (21.97M parameters)."""
    return create_staged(HcNetPaper, "hcnet_paper_tiny", pretrained, checkpoint_filter_fn, **{**_SWIN_T, **kwargs})
