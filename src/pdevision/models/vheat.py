"""vHeat: vision backbones with heat conduction (Wang et al., "vHeat: Building Vision Models upon
Heat Conduction"). Image patches are heat sources; each block's token mixer is the Heat Conduction
Operator, solved exactly with a 2-D DCT; Frequency Value Embeddings (FVE) set the diffusivity.

Layout: the stem is NCHW, stages run NHWC ``(B, H, W, C)``; ``forward_features`` returns NHWC,
``forward_intermediates`` returns NCHW (timm's convention).

Any input size: each stage's FVE is trained for the feature size of ``img_size``; at another size it
is resampled by :func:`pdevision.ops.resize_spectrum` (``fve_resize="interp"``: linear in the physical
frequency ``w = n pi / N``, unchanged at the training size; ``"pad"``: the authors' zero padding;
``"downstream"``: the authors' downstream rule, zero padding of a loaded FVE to ``img_size`` and bicubic
resampling at run time).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils.checkpoint
from timm.layers import ClassifierHead, calculate_drop_path_rates, trunc_normal_
from timm.models import generate_default_cfgs, register_model
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.layers import ConvDownsample, ConvStem, HeatConductionOperator, MixerBlock, run_block
from pdevision.models._arguments import check_rate
from pdevision.models._staged import StagedBackbone, create_staged, to_2tuple_size
from pdevision.models._weights import default_cfg, unwrap_state_dict
from pdevision.ops.dct import DctMethod
from pdevision.ops.heat import resize_spectrum

__all__ = ["VHeat", "VHeatStage", "checkpoint_filter_fn"]


def stage_fve(freq_embed: torch.Tensor, x: torch.Tensor, mode: str) -> torch.Tensor:
    """A stage's FVE ``(H, W, C)`` resampled to the size of its NHWC input ``x`` (see :func:`resize_spectrum`)."""
    return resize_spectrum(freq_embed, (x.shape[1], x.shape[2]), mode)


# An FX leaf: the resampling depends on concrete sizes (FX feature extraction traces around it).
torch.fx.wrap("stage_fve")


@torch.compiler.disable  # runs eagerly: under a strict (dynamo) export the symbolic sizes would look like ints
def _refuse_dynamic_size(size: tuple[object, object]) -> None:
    """Raise ``ValueError`` when a stage without FVEs is recorded with a symbolic or traced size."""
    if not all(isinstance(d, int) for d in size):
        raise ValueError(
            "this model was loaded from a folded checkpoint without frequency embeddings and runs at one feature size "
            f"only, so it cannot be exported or compiled with a dynamic height or width (stage size {size}); export "
            "it with static sizes, torch.onnx.export(model, (torch.randn(1, 3, H, W),), path, dynamo=True)"
        )


class VHeatStage(nn.Module):
    """Optional downsampling, then ``depth`` spectral blocks sharing one FVE. NHWC in and out.

    ``mixer`` (``dim -> module``, a :class:`~pdevision.layers.spectral.SpectralOperator`) builds each block's token
    mixer (:meth:`VHeat.mixer_factory`: vHeat's heat operator, WaveFormer's wave operator); the FVE is initialised
    from a truncated normal of standard deviation ``fve_std``; ``k_mode`` other than ``"fve"`` freezes it."""

    def __init__(
        self,
        in_dim: int | None,
        dim: int,
        depth: int,
        feat_size: tuple[int, int],
        mixer: Callable[[int], nn.Module],
        mlp_ratio: float = 4.0,
        post_norm: bool = False,
        layer_scale: float | None = None,
        drop_path: Sequence[float] = (),
        fve_resize: str = "interp",
        k_mode: str = "fve",
        fve_std: float = 0.02,
    ) -> None:
        super().__init__()
        self.feat_size = feat_size
        self.fve_resize = fve_resize
        self.grad_checkpointing = False
        # Set when weights came from a folded checkpoint without FVEs: only the folded size runs.
        self.folded_only = False
        self.downsample = ConvDownsample(in_dim, dim) if in_dim is not None else nn.Identity()
        self.freq_embed = nn.Parameter(torch.zeros(*feat_size, dim))
        trunc_normal_(self.freq_embed, std=fve_std)
        if k_mode != "fve":  # kept for a uniform layout (resizing, folding), but nothing reads it: frozen
            self.freq_embed.requires_grad_(False)
        dpr = list(drop_path) or [0.0] * depth
        self.blocks = nn.ModuleList(
            MixerBlock(
                dim,
                mixer(dim),
                mlp_ratio=mlp_ratio,
                post_norm=post_norm,
                layer_scale=layer_scale,
                drop_path=dpr[i],
            )
            for i in range(depth)
        )

    def fve(self, size: tuple[int, int]) -> torch.Tensor:
        """The stage's FVE resampled to a ``size = (h, w)`` feature map, ``(h, w, C)``."""
        return resize_spectrum(self.freq_embed, size, self.fve_resize)

    def folded_size(self) -> tuple[int, int] | None:
        k_exp = self.blocks[0].mixer.k_exp if len(self.blocks) else None
        return None if k_exp is None else (int(k_exp.shape[0]), int(k_exp.shape[1]))

    @torch.no_grad()
    def reparameterize(self, size: tuple[int, int] | None = None) -> None:
        """Fold the FVE projection into fixed decay factors for ``size`` (default: training size)."""
        fve = self.fve(size or self.feat_size)
        for block in self.blocks:
            block.mixer.fold(fve)

    def _folded_factors_apply(self, size: tuple[int, int]) -> bool:
        """Whether the blocks use their folded factors for a feature map of ``size``: in eval mode, at the size they
        were folded for. A stage loaded without FVEs has no other path. A recorded graph (FX, torch.export,
        torch.compile, tracing) may hold symbolic sizes: FX traces the folded path of a folded stage, the others the
        general path, which builds everything from the size."""
        folded = self.folded_size()
        if self.folded_only and (torch.compiler.is_exporting() or torch.jit.is_tracing()):
            _refuse_dynamic_size(size)  # no FVE to build another size's decay from (runs eagerly, with real sizes)
        if self.training or folded is None:
            use_folded = False
        elif is_fx_symbolic_tracing():
            return True
        elif not all(type(d) is int for d in size):
            use_folded = self.folded_only
        else:
            use_folded = folded == size
        if self.folded_only and not use_folded:
            raise ValueError(
                f"this stage was loaded from a folded (inference) checkpoint without frequency embeddings; "
                f"it runs only in eval mode at feature size {folded}, got {size} (training={self.training})"
            )
        return use_folded

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)
        folded = self._folded_factors_apply((x.shape[1], x.shape[2]))
        fve = None if folded else stage_fve(self.freq_embed, x, self.fve_resize)
        for block in self.blocks:
            x = run_block(block, x, fve, checkpointing=self.grad_checkpointing)
        return x


class VHeat(StagedBackbone):
    """vHeat backbone: conv stem (stride 4), four heat-conduction stages, LayerNorm, pooled linear head.

    Args:
        img_size: training resolution; sets the size of the FVEs (any input size runs).
        in_chans: input channels.
        num_classes: classifier outputs (0 for no classifier).
        global_pool: pooling of the head (timm's ``ClassifierHead``).
        depths: blocks per stage.
        dims: channels per stage, or the first stage's channels (doubled per stage).
        mlp_ratio: hidden width of the MLP as a multiple of the channels.
        post_norm: normalise branch outputs (``x + norm(f(x))``) instead of inputs.
        layer_scale: initial value of per-channel branch scaling, ``None`` for none.
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        fve_resize: ``"interp"``, ``"pad"`` or ``"downstream"``, how FVEs follow a new input size.
        dct_method: ``"auto"``, ``"matrix"`` or ``"fft"``.
        k_mode: ``"fve"`` (the paper), ``"learnable"`` (one scalar k per layer) or ``"fixed"`` (k = 1): the
            diffusivity ablation (see :class:`~pdevision.layers.HeatConductionOperator`).

    A subclass with another spectral token mixer (:class:`~pdevision.models.waveformer.WaveFormer`) overrides
    :meth:`mixer_factory` and the FVE's initial standard deviation ``fve_std``; everything else is shared.
    """

    #: standard deviation of the truncated-normal initial FVEs
    fve_std: float = 0.02

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        depths: Sequence[int] = (2, 2, 9, 2),
        dims: int | Sequence[int] = 96,
        mlp_ratio: float = 4.0,
        post_norm: bool = True,
        layer_scale: float | None = None,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.2,
        fve_resize: str = "interp",
        dct_method: DctMethod = "auto",
        k_mode: str = "fve",
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"VHeat got unexpected arguments: {sorted(kwargs)}")
        drop_path_rate = check_rate(drop_path_rate)
        if fve_resize not in ("interp", "pad", "downstream"):
            raise ValueError(f"fve_resize must be 'interp' or 'pad' or 'downstream', got {fve_resize!r}")
        super().__init__(in_chans, num_classes, global_pool, depths, dims, output_fmt="NHWC")
        self.img_size = to_2tuple_size(img_size)
        dpr = calculate_drop_path_rates(drop_path_rate, self.depths, stagewise=True)
        mixer = self.mixer_factory(dct_method, k_mode)

        self.stem = ConvStem(in_chans, self.dims[0])
        self.stages = nn.ModuleList(
            VHeatStage(
                in_dim=self.dims[i - 1] if i > 0 else None,
                dim=self.dims[i],
                depth=self.depths[i],
                feat_size=self.stage_feature_size(i, self.img_size),
                mlp_ratio=mlp_ratio,
                post_norm=post_norm,
                layer_scale=layer_scale,
                drop_path=dpr[i],
                fve_resize=fve_resize,
                k_mode=k_mode,
                mixer=mixer,
                fve_std=self.fve_std,
            )
            for i in range(len(self.depths))
        )
        self.norm = nn.LayerNorm(self.num_features)
        self.head = ClassifierHead(
            self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate, input_fmt="NHWC"
        )
        self.apply(self.init_linear)

    @staticmethod
    def mixer_factory(dct_method: DctMethod, k_mode: str) -> Callable[[int], nn.Module]:
        """``dim -> token mixer`` of every block: vHeat's :class:`~pdevision.layers.HeatConductionOperator`."""
        return lambda dim: HeatConductionOperator(dim, dct_method=dct_method, k_mode=k_mode)

    # -- timm model API -------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {f"stages.{i}.freq_embed" for i in range(len(self.stages))}

    @torch.no_grad()
    def reparameterize(self, img_size: int | tuple[int, int] | None = None) -> None:
        """Fold every stage's FVE projection into decay factors for ``img_size`` (default: training). The same
        modules as ``timm.utils.model.reparameterize_model(model)``, which folds for the training size
        (:meth:`StagedBackbone.reparameterize <pdevision.models._staged.StagedBackbone.reparameterize>`)."""
        super().reparameterize(img_size)


# -- checkpoints ------------------------------------------------------------------------------------

_AUTHOR_KEYS = (
    (r"^patch_embed\.conv(\d)\.", r"stem.conv\1."),
    (r"^patch_embed\.norm(\d)\.1\.", r"stem.norm\1."),
    (r"^freq_embed\.(\d+)$", r"stages.\1.freq_embed"),
    (r"^classifier\.0\.", "norm."),
    (r"^classifier\.3\.", "head.fc."),
)


def _map_author_key(key: str, value: torch.Tensor, depths: Sequence[int]) -> tuple[str, torch.Tensor] | None:
    for pattern, repl in _AUTHOR_KEYS:
        if re.match(pattern, key):
            return re.sub(pattern, repl, key), value
    m = re.match(r"^layers\.(\d+)\.(\d+)\.(.*)$", key)
    if m is None:
        return None
    stage, index, rest = int(m.group(1)), int(m.group(2)), m.group(3)
    if index >= depths[stage]:  # the authors downsample at the end of a stage, we at the start of the next
        part = {"0.weight": "conv.weight", "1.weight": "norm.weight", "1.bias": "norm.bias"}[rest]
        return f"stages.{stage + 1}.downsample.{part}", value
    rest = rest.replace("op.", "mixer.", 1).replace("gamma1", "ls1.gamma").replace("gamma2", "ls2.gamma")
    if rest.startswith("mlp.fc") and rest.endswith(".weight") and value.ndim == 4:
        value = value.flatten(1)  # 1x1 conv -> linear
    return f"stages.{stage}.blocks.{index}.{rest}", value


def checkpoint_filter_fn(state_dict: dict[str, Any], model: VHeat) -> dict[str, torch.Tensor]:
    """Convert a vHeat checkpoint to this model's layout.

    Accepts the authors' layout (``patch_embed.*``, ``freq_embed.<i>``, ``layers.<i>.<j>.op.*``,
    ``classifier.*``; training or folded ``infer_mode`` form, optionally inside ``model`` /
    ``model_ema``) and this library's own layout. FVEs trained at another resolution are resampled
    to the model's ``img_size`` with its ``fve_resize`` rule. A folded checkpoint (decay factors
    ``k_exp``) folds ``model`` at that size; without FVEs the model then runs only at that size.
    """
    state_dict = unwrap_state_dict(state_dict)
    if any(k.startswith(("patch_embed.", "layers.")) for k in state_dict):
        converted = {}
        for key, value in state_dict.items():
            mapped = _map_author_key(key, value, model.depths)
            if mapped is not None:
                converted[mapped[0]] = mapped[1]
        state_dict = converted

    for i, stage in enumerate(model.stages):
        key = f"stages.{i}.freq_embed"
        if key in state_dict and state_dict[key].shape != stage.freq_embed.shape:
            mode = "pad" if stage.fve_resize == "downstream" else stage.fve_resize  # authors: pad at load
            state_dict[key] = resize_spectrum(state_dict[key], stage.feat_size, mode)
        k_exp_key = f"stages.{i}.blocks.0.mixer.k_exp"
        if k_exp_key in state_dict:
            size = tuple(state_dict[k_exp_key].shape[:2])
            stage.reparameterize(size)
            if key not in state_dict:
                stage.folded_only = True
    own = model.state_dict()
    for key, value in own.items():  # folded checkpoints carry no FVE / to_k: keep the model's own
        if key not in state_dict and (".freq_embed" in key or ".mixer.to_k." in key):
            state_dict[key] = value
    return state_dict


# -- registry ------------------------------------------------------------------------------------


# The authors' ImageNet-1K classification checkpoints, release assets of github MzeroMiko/vHeat (linked from their
# README's table at commit bcc4da7c); read by timm with ``weights_only=True`` and converted by
# :func:`checkpoint_filter_fn`. Their detection and segmentation checkpoints are mmdet / mmseg models (a backbone
# with per-output norms ``outnorm<i>``, trained at other resolutions) and are not registered here.
_ORIGIN = "https://github.com/MzeroMiko/vHeat"
_RELEASE = f"{_ORIGIN}/releases/download/vheatcls"

default_cfgs = generate_default_cfgs(
    {
        "vheat_micro.untrained": default_cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        **{
            f"vheat_{size}.in1k": default_cfg(
                url=f"{_RELEASE}/vHeat_{size}.pth",
                paper_ids="arXiv:2405.16555",
                origin_url=_ORIGIN,
                license=None,
                notes=(f"authors' top-1 {top1}; their repository states no license",),
            )
            for size, top1 in (("tiny", 82.2), ("small", 83.6), ("base", 83.9))
        },
    }
)


@register_model
def vheat_micro(pretrained: bool = False, **kwargs: Any) -> VHeat:
    """vHeat-Micro (this library's CPU-sized model): dims 32, depths 1-1-3-1, pre-norm, 64 px."""
    args = dict(img_size=64, dims=32, depths=(1, 1, 3, 1), post_norm=False, drop_path_rate=0.0)
    return create_staged(VHeat, "vheat_micro", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def vheat_tiny(pretrained: bool = False, **kwargs: Any) -> VHeat:
    """vHeat-T: dims 96, depths 2-2-6-2, pre-norm, drop path 0.1 (30.85M parameters)."""
    args = dict(dims=96, depths=(2, 2, 6, 2), post_norm=False, drop_path_rate=0.1)
    return create_staged(VHeat, "vheat_tiny", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def vheat_small(pretrained: bool = False, **kwargs: Any) -> VHeat:
    """vHeat-S: dims 96, depths 2-2-18-2, post-norm, layer scale 1e-5, drop path 0.3 (52.22M)."""
    args = dict(dims=96, depths=(2, 2, 18, 2), post_norm=True, layer_scale=1e-5, drop_path_rate=0.3)
    return create_staged(VHeat, "vheat_small", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def vheat_base(pretrained: bool = False, **kwargs: Any) -> VHeat:
    """vHeat-B: dims 128, depths 2-2-18-2, post-norm, layer scale 1e-5, drop path 0.5 (92.13M).

    The configuration of the authors' repository (``vHeat_base_224.yaml``); their README's 87M is the folded
    inference model's count (87.50M). The CVPR text's vHeat-B (68M, 11.2 GFLOPs) has an unpublished
    configuration and is not this model."""
    args = dict(dims=128, depths=(2, 2, 18, 2), post_norm=True, layer_scale=1e-5, drop_path_rate=0.5)
    return create_staged(VHeat, "vheat_base", pretrained, checkpoint_filter_fn, **{**args, **kwargs})
