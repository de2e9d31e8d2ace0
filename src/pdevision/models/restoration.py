"""Image restoration networks: vHeatIR and two baselines for comparisons at equal parameters.

**vHeatIR** (vHeat paper, section 5 "low-level vision tasks"): the Heat Conduction Operator put
into SwinIR in place of self-attention, evaluated on grey/colour denoising (Set12, McMaster) and
JPEG artefact removal (LIVE1) "with the same settings as SwinIR", and shows colour denoising at
sigma 15 after 15,000 training iterations (its Fig. 6). The paper's text gives no more:
it leaves open the width, depth and number of groups, the size of the Frequency Value Embeddings
(FVE), whether the HCO runs over the whole image or in windows, pre- or post-norm, and its
Table 5 figures are not in the text we have. This module therefore **reconstructs** vHeatIR from
SwinIR's published denoising layout (shallow 3x3 conv; residual groups of blocks, each group
ending in a 3x3 conv with a group residual; LayerNorm; 3x3 conv after the body with a long skip;
3x3 reconstruction conv; the input image added back as a global residual), with each group a
:class:`~pdevision.models.vheat.VHeatStage` of pre-norm heat-conduction blocks (HCO token mixer,
MLP) sharing one FVE, the HCO acting on the whole feature map (not in windows). The FVEs are
trained at the patch size ``img_size`` and resampled to any other input size by
:func:`pdevision.ops.resize_spectrum` (as in :mod:`pdevision.models.vheat`). SwinIR's mean
subtraction is left out (images in [0, 1]).

**DnCNN-style** (Zhang et al. 2017): conv+ReLU, ``depth - 2`` conv+BN+ReLU, conv; it predicts the
residual (the noise), subtracted from the input.

**SwinIR-style** (Liang et al. 2021): the same layout as vHeatIR with timm's
:class:`~timm.models.swin_transformer.SwinTransformerBlock` (window attention, shifted every other
block) as the group's blocks; the input is reflect-padded to a multiple of the window and cropped
back, as SwinIR does (replicated instead along a side shorter than its padding, which reflection
cannot pad). These are this library's re-implementations, not the authors' weights.

All three: NCHW images in ``[0, 1]`` in and out, grey (``in_chans=1``) or colour (3), any size.
``*_micro`` are CPU-sized; ``*_base`` are the paper-sized configurations (SwinIR's denoising
setting: width 180, 6 groups of 6 blocks, MLP ratio 2, window 8, 128 px patches; DnCNN-S: 17
layers of 64). :func:`match_params` sizes a baseline to the parameter count of a given model.

The nets are in this library's registry of restoration models (:func:`list_restoration_models`,
:func:`create_restoration_model`), not in timm's: timm's registry holds classifiers and backbones, whose contract
(``num_classes``, ``forward_features`` / ``forward_head``, pooled features) an image-to-image net does not have.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from timm.models.swin_transformer import SwinTransformerBlock
from torch import nn

from pdevision.layers import run_block
from pdevision.models._arguments import ModelArgumentError, ModelNameError, check_model_args, check_model_size
from pdevision.models._staged import to_2tuple_size
from pdevision.models.vheat import VHeat, VHeatStage
from pdevision.ops.dct import DctMethod

__all__ = [
    "ARCHITECTURES",
    "DnCNN",
    "RestorationNet",
    "SwinIRStyle",
    "VHeatIR",
    "count_trainable_params",
    "create_restoration_model",
    "is_restoration_model",
    "list_restoration_models",
    "match_params",
]


class _ResidualGroup(nn.Module):
    """A group of NHWC blocks, then a 3x3 conv, plus the group's input (SwinIR's RSTB). NCHW in/out."""

    def __init__(self, body: nn.Module, dim: int) -> None:
        super().__init__()
        self.body = body
        self.conv = nn.Conv2d(dim, dim, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return x + self.conv(y)


class _SwinBlocks(nn.Module):
    """timm Swin blocks in sequence (NHWC), shifted every other block; optional checkpointing."""

    def __init__(self, dim: int, depth: int, num_heads: int, window_size: int, mlp_ratio: float) -> None:
        super().__init__()
        self.grad_checkpointing = False
        self.blocks = nn.ModuleList(
            SwinTransformerBlock(
                dim,
                input_resolution=(window_size * 8, window_size * 8),  # only sets the window; any size runs
                num_heads=num_heads,
                window_size=window_size,
                shift_size=0 if i % 2 == 0 else window_size // 2,
                always_partition=True,
                dynamic_mask=True,  # the shift mask for the actual size
                mlp_ratio=mlp_ratio,
            )
            for i in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = run_block(block, x, checkpointing=self.grad_checkpointing)
        return x


class RestorationNet(nn.Module):
    """SwinIR's layout with a pluggable group body: shallow conv, residual groups, LayerNorm, conv with
    a long skip, reconstruction conv, and the input added back. NCHW images in and out, any size.

    Args:
        in_chans: image channels (1 grey, 3 colour).
        embed_dim: feature channels.
        depths: blocks per residual group.
        make_body: ``(dim, depth) -> nn.Module`` mapping NHWC to NHWC features.
        pad_multiple: the input is padded to a multiple of this (reflected; replicated along a side too
            short to reflect) and cropped back.
    """

    def __init__(
        self,
        in_chans: int,
        embed_dim: int,
        depths: Sequence[int],
        make_body: Callable[[int, int], nn.Module],
        pad_multiple: int = 1,
    ) -> None:
        super().__init__()
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.depths = tuple(depths)
        self.pad_multiple = pad_multiple
        self.conv_first = nn.Conv2d(in_chans, embed_dim, 3, padding=1)
        self.groups = nn.ModuleList(_ResidualGroup(make_body(embed_dim, d), embed_dim) for d in depths)
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, padding=1)
        self.conv_last = nn.Conv2d(embed_dim, in_chans, 3, padding=1)
        # zero-initialised reconstruction: the untrained network is the identity (this library's choice,
        # for short trainings; SwinIR uses PyTorch's default initialisation)
        nn.init.zeros_(self.conv_last.weight)
        nn.init.zeros_(self.conv_last.bias)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for group in self.groups:
            if hasattr(group.body, "grad_checkpointing"):
                group.body.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Deep features (NCHW) of the shallow features ``x`` (NCHW)."""
        for group in self.groups:
            x = group(x)
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_chans:
            raise ValueError(f"expected images (B, {self.in_chans}, H, W), got {tuple(x.shape)}")
        h, w = x.shape[-2:]
        m = self.pad_multiple
        inp = _pad_to_multiple(x, m)
        shallow = self.conv_first(inp)
        deep = self.conv_after_body(self.forward_features(shallow)) + shallow
        out = inp + self.conv_last(deep)
        return out[..., :h, :w]


def _pad_to_multiple(x: torch.Tensor, m: int) -> torch.Tensor:
    """Pad ``x`` (NCHW) at the bottom and right to multiples of ``m``: reflected as SwinIR does, or
    replicated along a side too short to reflect (an image smaller than the padding)."""
    for dim in (-1, -2):
        pad = (-x.shape[dim]) % m
        if pad:
            widths = (0, pad, 0, 0) if dim == -1 else (0, 0, 0, pad)
            x = F.pad(x, widths, mode="reflect" if pad < x.shape[dim] else "replicate")
    return x


class VHeatIR(RestorationNet):
    """vHeatIR as reconstructed here (see the module docstring for what the paper leaves open).

    Args:
        img_size: training patch size; sets the FVE size (any input size runs, FVEs resampled).
        in_chans: 1 (grey) or 3 (colour).
        embed_dim: feature channels.
        depths: heat-conduction blocks per residual group.
        mlp_ratio: MLP width as a multiple of the channels.
        fve_resize: ``"interp"`` or ``"pad"`` (see :func:`pdevision.ops.resize_spectrum`).
        dct_method: ``"auto"``, ``"matrix"`` or ``"fft"``.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 128,
        in_chans: int = 3,
        embed_dim: int = 180,
        depths: Sequence[int] = (6, 6, 6, 6, 6, 6),
        mlp_ratio: float = 2.0,
        fve_resize: str = "interp",
        dct_method: DctMethod = "auto",
        **kwargs: Any,
    ) -> None:
        _refuse_extra(kwargs, "VHeatIR")
        feat_size = to_2tuple_size(img_size)
        super().__init__(
            in_chans,
            embed_dim,
            depths,
            lambda dim, depth: VHeatStage(
                in_dim=None,
                dim=dim,
                depth=depth,
                feat_size=feat_size,
                mlp_ratio=mlp_ratio,
                post_norm=False,
                mixer=VHeat.mixer_factory(dct_method, "fve"),
                fve_resize=fve_resize,
            ),
        )
        self.img_size = feat_size

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {f"groups.{i}.body.freq_embed" for i in range(len(self.groups))}


class SwinIRStyle(RestorationNet):
    """SwinIR-style restoration net from timm's Swin blocks (window attention, shifted windows).

    Args:
        in_chans: 1 (grey) or 3 (colour).
        embed_dim: feature channels (a multiple of ``num_heads``).
        depths: Swin blocks per residual group.
        num_heads: attention heads.
        window_size: attention window; the input is reflect-padded to a multiple of it.
        mlp_ratio: MLP width as a multiple of the channels.
    """

    def __init__(
        self,
        in_chans: int = 3,
        embed_dim: int = 180,
        depths: Sequence[int] = (6, 6, 6, 6, 6, 6),
        num_heads: int = 6,
        window_size: int = 8,
        mlp_ratio: float = 2.0,
        **kwargs: Any,
    ) -> None:
        _refuse_extra(kwargs, "SwinIRStyle")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.window_size = window_size
        super().__init__(
            in_chans,
            embed_dim,
            depths,
            lambda dim, depth: _SwinBlocks(dim, depth, num_heads, window_size, mlp_ratio),
            pad_multiple=window_size,
        )

    @torch.jit.ignore
    def no_weight_decay_keywords(self) -> set[str]:
        return {"relative_position_bias_table"}


class DnCNN(nn.Module):
    """DnCNN-style residual denoiser: conv+ReLU, ``depth - 2`` x (conv+BN+ReLU), conv predicting the
    degradation, subtracted from the input. NCHW in and out, any size."""

    def __init__(self, in_chans: int = 3, width: int = 64, depth: int = 17, **kwargs: Any) -> None:
        _refuse_extra(kwargs, "DnCNN")
        super().__init__()
        if depth < 3:
            raise ValueError(f"DnCNN depth must be at least 3, got {depth}")
        self.in_chans = in_chans
        self.width = width
        self.depth = depth
        layers: list[nn.Module] = [nn.Conv2d(in_chans, width, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        layers.append(nn.Conv2d(width, in_chans, 3, padding=1))
        nn.init.zeros_(layers[-1].weight)  # starts as the identity, like the other nets here
        nn.init.zeros_(layers[-1].bias)
        self.body = nn.Sequential(*layers)

    def set_grad_checkpointing(self, enable: bool = True) -> None:  # timm API; nothing to checkpoint
        del enable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_chans:
            raise ValueError(f"expected images (B, {self.in_chans}, H, W), got {tuple(x.shape)}")
        return x - self.body(x)


def _refuse_extra(kwargs: dict[str, Any], name: str) -> None:
    """A ``TypeError`` naming any argument the net does not take (a restoration net has no classifier: no
    ``num_classes``, ``global_pool`` or ``drop_rate``)."""
    if kwargs:
        raise TypeError(f"{name} got unexpected arguments: {sorted(kwargs)}")


# -- the registry of restoration models: one name per architecture and size ----------------------------------
# Not timm's registry: timm's is for classifiers and backbones (``num_classes``, ``forward_features``,
# ``forward_head``, pooled features), and a restoration net maps an image to an image.

ARCHITECTURES: tuple[str, ...] = ("vheatir", "dncnn", "swinir")

_RESTORATION_MODELS: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {
    # vHeatIR-Micro (CPU-sized): width 32, 2 groups of 2 heat-conduction blocks, 48 px patches
    "vheatir_micro": (VHeatIR, dict(img_size=48, embed_dim=32, depths=(2, 2), mlp_ratio=2.0)),
    # vHeatIR at SwinIR's denoising size: width 180, 6 groups of 6 blocks, MLP ratio 2, 128 px patches
    "vheatir_base": (VHeatIR, dict(img_size=128, embed_dim=180, depths=(6,) * 6, mlp_ratio=2.0)),
    # SwinIR-style Micro: width 32, 2 groups of 2 Swin blocks, 4 heads, window 8
    "swinir_micro": (SwinIRStyle, dict(embed_dim=32, depths=(2, 2), num_heads=4, window_size=8, mlp_ratio=2.0)),
    # SwinIR-style at SwinIR's denoising size: width 180, 6 groups of 6 blocks, 6 heads, window 8
    "swinir_base": (SwinIRStyle, dict(embed_dim=180, depths=(6,) * 6, num_heads=6, window_size=8, mlp_ratio=2.0)),
    # DnCNN-style Micro: 8 layers of 32 channels
    "dncnn_micro": (DnCNN, dict(width=32, depth=8)),
    # DnCNN-S: 17 layers of 64 channels
    "dncnn_base": (DnCNN, dict(width=64, depth=17)),
}
_WIDTH_KEY = {VHeatIR: "embed_dim", SwinIRStyle: "embed_dim", DnCNN: "width"}


def list_restoration_models(pattern: str = "*") -> list[str]:
    """Names of the registered restoration models matching the wildcard ``pattern``, sorted."""
    return sorted(n for n in _RESTORATION_MODELS if fnmatch.fnmatchcase(n, pattern))


def is_restoration_model(name: str) -> bool:
    """Whether ``name`` is a registered restoration model."""
    return name in _RESTORATION_MODELS


def count_trainable_params(model: nn.Module) -> int:
    """Number of trainable parameters (``pdevision.bench.count_params`` counts them all)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def match_params(name: str, target: int, in_chans: int = 3, **overrides: Any) -> dict[str, Any]:
    """Configuration of the registered model ``name`` with its width chosen so its parameter count is closest to
    ``target`` (depths fixed; the SwinIR-style width stays a multiple of its heads)."""
    cls, cfg = _RESTORATION_MODELS[name]
    cfg = {**cfg, **overrides, "in_chans": in_chans}
    key = _WIDTH_KEY[cls]
    step = int(cfg.get("num_heads", 1))

    def params(width: int) -> int:
        with torch.device("meta"):
            return count_trainable_params(cls(**{**cfg, key: width}))

    best, best_gap, width = step, math.inf, step
    while True:
        gap = params(width) - target
        if abs(gap) < best_gap:
            best, best_gap = width, abs(gap)
        if gap > 0 or width > 4096:
            break
        width += step
    cfg[key] = best
    return cfg


def create_restoration_model(
    name: str,
    in_chans: int = 3,
    patch_size: int | None = None,
    model_args: dict[str, Any] | None = None,
    match_to: int | None = None,
) -> nn.Module:
    """A registered restoration model by name (``vheatir_*``, ``swinir_*``, ``dncnn_*``; see
    :func:`list_restoration_models`) for ``in_chans`` channels, with ``model_args`` over its configuration;
    vHeatIR's FVEs are sized for ``patch_size`` unless ``model_args`` says otherwise; with ``match_to`` (a parameter
    count) its width is chosen to match it (:func:`match_params`). The one builder of the restoration tasks, their
    checkpoints and the studies; the arguments are checked (:func:`~pdevision.models._arguments.check_model_args`)
    and the size bounded before anything is allocated."""
    if not is_restoration_model(name):
        raise ModelNameError(
            f"{name!r} is not a restoration model; choose one of {', '.join(list_restoration_models())}"
        )
    given = dict(model_args or {})
    args = {k: v for k, v in check_model_args(dict(given)).items() if not (k == "pretrained" and v is False)}
    cls, cfg = _RESTORATION_MODELS[name]
    if patch_size is not None and "img_size" in cfg:
        args.setdefault("img_size", patch_size)
    if match_to is not None:
        cfg = match_params(name, match_to, in_chans, **args)
    else:
        cfg = {**cfg, **args, "in_chans": in_chans}
    # bounded before anything is allocated: widths multiply, and vHeatIR's FVEs grow with the square of the patch
    check_model_size(lambda: cls(**cfg), name, args or {"patch": patch_size})
    try:
        return cls(**cfg)
    except TypeError as exc:  # an unknown or ill-typed model argument
        raise ModelArgumentError(f"{name} does not take the model arguments {given}: {exc}") from exc
    except (AssertionError, AttributeError, IndexError, KeyError, RuntimeError, ZeroDivisionError) as exc:  # missed
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ModelArgumentError(f"{name} cannot be built with the model arguments {given!r:.160} ({text})") from exc
