"""HcNet's layers: the Heat Conduction Layer (HcL) and the Refinement Approximation Layer (RaL), from Zhang & Gong,
"Efficient Visual Representation Learning with Heat Conduction Equation".

The authors' network (their released ``HcNet.py``, github ZheminZhang1/HcNet; ``hcnet_*``'s default layout), NCHW:

- :class:`NeighbourMeanHeat`: the heat step's increment ``alpha (mean_8(x) - x)``, ``alpha = sigmoid(Conv1x1(GAP(x)))``;
- :class:`RefinementMlp`: the RaL branch ``Conv1x1 -> GELU -> depthwise 3x3 -> Conv1x1``;
- :class:`HcRaBlock`: ``x <- x + heat(x)``, then ``x <- x + RaL(GroupNorm(x))``;
- :class:`HcStem` and :class:`HcDownsample`: their convolutional stem and downsampling.

The library's earlier reconstruction from the paper's text (``layout="library"`` / ``"paper"``): a library block is
the shared :class:`~pdevision.layers.MixerBlock` with

- token mixer :class:`HeatConductionMixer` (``Linear -> HcL -> Linear``), and
- FFN the RaL ``z + Linear_beta(tau(Linear(z)))``: MixerBlock's MLP with the activation ``tau`` =
  :class:`RefinementActivation` (GELU then a depthwise 3x3 filter); the block supplies the residual.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from timm.layers import DropPath, LayerScale, Mlp, trunc_normal_
from torch import nn

from pdevision.ops.fdm import BOUNDARIES, Boundary, fdm_heat_step, neighbour_mean, stable_coefficients

__all__ = [
    "DEFAULT_PARAMETRISATION",
    "K_MODES",
    "PARAMETRISATIONS",
    "GroupNorm1",
    "HcDownsample",
    "HcRaBlock",
    "HcStem",
    "HeatConductionLayer",
    "HeatConductionMixer",
    "KMode",
    "NeighbourMeanHeat",
    "PaperHcRaBlock",
    "Parametrisation",
    "RefinementActivation",
    "RefinementMlp",
    "matched_hidden",
    "refinement_act_layer",
]

# An FX leaf: the step checks concrete shapes (torchvision / timm FX feature extraction traces around it).
torch.fx.wrap("fdm_heat_step")

KMode = Literal["fixed", "learnable", "input"]
Parametrisation = Literal["paper", "stable"]
K_MODES: tuple[str, ...] = ("fixed", "learnable", "input")
PARAMETRISATIONS: tuple[str, ...] = ("paper", "stable")
# Same accuracy as "paper" in benchmarks/hcnet_parametrisation, with the maximum principle guaranteed
# (see the module docstring of pdevision.models.hcnet).
DEFAULT_PARAMETRISATION: Parametrisation = "stable"


class HeatConductionLayer(nn.Module):
    """HcNet HcL: ``z' = z + k (N(z) - W z)``, ``N`` the 4-neighbour sum weighted by ``w1..w4`` per channel.

    Input and output: NCHW ``(B, C, H, W)``, any ``H, W``. The step is one depthwise 3x3 convolution
    (:func:`pdevision.ops.fdm_heat_step`) times ``k``, repeated ``steps`` times with the same ``k``.

    Args:
        dim: channels ``C``.
        k_mode: how the step size ``k`` is set (the paper's ablation):
            ``"fixed"``: the constant ``k_init``; ``"learnable"``: ``k = sigmoid(theta)``, one scalar per layer,
            initialised to ``k_init``; ``"input"`` (default): ``k = sigmoid(Linear(GAP(z)))``, one value per
            sample and channel (the SE-like path of the paper); zero bias, so ``k`` is near 0.5 at HcNet's
            initialisation (projection weights of std 0.02).
        k_init: ``k`` of the fixed mode and initial ``k`` of the learnable mode (default 0.5, about the input
            mode's initial value, so the three modes start from nearly the same function).
        parametrisation: ``"paper"``: ``w`` unconstrained, ``k`` used as is (as published). ``"stable"``:
            ``w = softplus(raw)`` and ``k' = k / max(W, 1)`` (:func:`pdevision.ops.stable_coefficients`), so
            ``w >= 0`` and ``k' W <= 1``: each step is a convex combination of its stencil inputs (discrete
            maximum principle). Both start at ``w1..w4 = w_init`` (the same function when ``4 w_init <= 1``).
        boundary: ``"insulated"`` (edge replication, Neumann; default) or ``"zeros"`` (zero padding).
        steps: explicit sub-steps per layer; ``m`` steps reach ``m`` pixels (``m`` depthwise convolutions).
        w_init: initial stencil weight (isotropic), default 0.25 (``W = 1``).
    """

    def __init__(
        self,
        dim: int,
        k_mode: KMode = "input",
        k_init: float = 0.5,
        parametrisation: Parametrisation = DEFAULT_PARAMETRISATION,
        boundary: Boundary = "insulated",
        steps: int = 1,
        w_init: float = 0.25,
    ) -> None:
        super().__init__()
        if k_mode not in K_MODES:
            raise ValueError(f"k_mode must be one of {K_MODES}, got {k_mode!r}")
        if parametrisation not in PARAMETRISATIONS:
            raise ValueError(f"parametrisation must be one of {PARAMETRISATIONS}, got {parametrisation!r}")
        if boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        if k_mode == "learnable" and not 0.0 < k_init < 1.0:
            raise ValueError(f"the learnable k is a sigmoid: k_init must be in (0, 1), got {k_init}")
        if parametrisation == "stable" and not 0.0 <= k_init <= 1.0:
            raise ValueError(f"the stable parametrisation needs 0 <= k <= 1, got k_init={k_init}")
        if parametrisation == "stable" and w_init <= 0.0:
            raise ValueError(f"the stable parametrisation has w = softplus(raw) > 0, got w_init={w_init}")
        self.dim = dim
        self.k_mode: KMode = k_mode
        self.k_init = float(k_init)
        self.parametrisation: Parametrisation = parametrisation
        self.boundary: Boundary = boundary
        self.steps = steps
        raw = w_init if parametrisation == "paper" else math.log(math.expm1(w_init))  # softplus^-1
        self.weight = nn.Parameter(torch.full((dim, 4), float(raw)))
        self.k_logit = nn.Parameter(torch.tensor(math.log(k_init / (1 - k_init)))) if k_mode == "learnable" else None
        self.k_proj = nn.Linear(dim, dim) if k_mode == "input" else None
        if self.k_proj is not None:
            nn.init.zeros_(self.k_proj.bias)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, k_mode={self.k_mode}, parametrisation={self.parametrisation}, "
            f"boundary={self.boundary}, steps={self.steps}"
        )

    def rate(self, z: torch.Tensor) -> torch.Tensor:
        """The step size ``k`` before stabilisation: ``(B, C, 1, 1)`` in input mode, else a 0-d tensor."""
        if self.k_proj is not None:
            return torch.sigmoid(self.k_proj(z.mean(dim=(2, 3))))[:, :, None, None]
        if self.k_logit is not None:
            return torch.sigmoid(self.k_logit)
        return self.weight.new_tensor(self.k_init)

    def coefficients(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stencil weights ``w`` ``(C, 4)`` and the step size ``k`` used for the input ``z`` (NCHW)."""
        k = self.rate(z)
        if self.parametrisation == "stable":
            return stable_coefficients(self.weight, k)
        return self.weight, k

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        weight, k = self.coefficients(z)
        return fdm_heat_step(z, weight, k, steps=self.steps, boundary=self.boundary)


class HeatConductionMixer(nn.Module):
    """HcNet's token mixer: ``Linear_out(HcL(Linear_in(x)))``, the heat step on a learned projection.

    Input and output: NHWC ``(B, H, W, C)``; the HcL runs on an NCHW view (channels-last memory).
    Keyword arguments go to :class:`HeatConductionLayer`.
    """

    def __init__(self, dim: int, **hcl_kwargs: Any) -> None:
        super().__init__()
        self.proj_in = nn.Linear(dim, dim)
        self.heat = HeatConductionLayer(dim, **hcl_kwargs)
        self.proj_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.heat(self.proj_in(x).permute(0, 3, 1, 2))
        return self.proj_out(z.permute(0, 2, 3, 1))


class PaperHcRaBlock(nn.Module):
    """The Hc-Ra block as the HcNet paper's text describes it (``layout="paper"``). NHWC in and out.

    ``x <- HcL(x)``: the heat step on the stream itself, ``x + k (N(x) - W x)`` with ``k = sigmoid(Linear(GAP(x)))``
    from the layer input (the HcL's ``z +`` is the block's first residual; stochastic depth and layer scale act
    on its increment). ``x <- x + Linear_beta(tau(Linear(LN(x))))``: the RaL, ``tau`` = GELU and the depthwise
    filter. The paper's block figure did not survive the text extraction: the LayerNorm before the RaL (and none
    before the HcL, whose ``k`` is to come from the layer input) is this library's choice.
    """

    def __init__(
        self,
        dim: int,
        mlp_ratio: float = 4.0,
        ra_filter: bool = True,
        layer_scale: float | None = None,
        drop_path: float = 0.0,
        **hcl_kwargs: Any,
    ) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.heat = HeatConductionLayer(dim, **hcl_kwargs)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        act = refinement_act_layer(dim, mlp_ratio, ra_filter) if ra_filter else nn.GELU
        self.mlp = Mlp(dim, hidden, act_layer=act)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.permute(0, 3, 1, 2)
        x = x + self.drop_path1(self.ls1((self.heat(z) - z).permute(0, 2, 3, 1)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class RefinementActivation(nn.Module):
    """``tau`` of HcNet's RaL ``z + Linear_beta(tau(Linear(z)))``: GELU then a depthwise 3x3 filter.

    Input and output: NHWC ``(B, H, W, hidden)`` (the filter runs on an NCHW view, zero padding).
    """

    def __init__(self, hidden: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.act = nn.GELU()
        self.dwconv = nn.Conv2d(hidden, hidden, kernel_size, padding=kernel_size // 2, groups=hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dwconv(self.act(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


def matched_hidden(dim: int, hidden: int, kernel_size: int = 3) -> int:
    """Hidden width of a filter-free RaL with about the parameters of one with the depthwise filter.

    With the filter the RaL has ``2 dim h + h + dim`` (two linears) ``+ (k^2 + 1) h`` (the filter) parameters;
    without it ``2 dim h' + h' + dim``. The nearest integer ``h'`` to ``h (2 dim + k^2 + 2) / (2 dim + 1)``
    leaves a difference below ``dim`` parameters per block (the paper's Table 6 compares the filter at the same
    parameter count; how the paper matched it is not in its text).
    """
    return round(hidden * (2 * dim + kernel_size**2 + 2) / (2 * dim + 1))


def refinement_act_layer(dim: int, mlp_ratio: float = 4.0, filter: bool = True) -> Callable[[], nn.Module]:
    """The ``act_layer`` that turns MixerBlock's MLP into the RaL branch ``Linear_beta(tau(Linear(z)))``:
    ``tau`` = GELU + depthwise filter, or plain GELU with ``filter=False`` (the paper's second ablation).
    The hidden width is MixerBlock's ``int(dim * mlp_ratio)``."""
    if not filter:
        return nn.GELU
    return functools.partial(RefinementActivation, int(dim * mlp_ratio))


# -- the authors' network (HcNet.py of github ZheminZhang1/HcNet) -----------------------------------------------


class GroupNorm1(nn.GroupNorm):
    """``GroupNorm(1, C)``: normalises each sample over channels and space together (PoolFormer's norm, the HcNet
    authors' only norm). NCHW in and out."""

    def __init__(self, num_channels: int) -> None:
        super().__init__(1, num_channels)


def init_block_conv(m: nn.Module) -> None:
    """The HcNet authors' initialisation of a block's convolutions: truncated normal (std 0.02), zero biases."""
    if isinstance(m, nn.Conv2d):
        trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


class NeighbourMeanHeat(nn.Module):
    """The HcNet authors' heat step, as its increment: ``alpha (mean_8(x) - x)`` (the block adds it to ``x``).

    ``mean_8`` is the mean of the 8 neighbours inside the image (:func:`pdevision.ops.fdm.neighbour_mean`: 3 at
    corners, 5 on edges), so ``x + alpha (mean_8(x) - x) = (1 - alpha) x + alpha mean_8(x)`` is a convex combination
    for ``0 <= alpha <= 1``: the discrete maximum principle holds in every ``k_mode``. NCHW in and out, any size.

    Args:
        dim: channels ``C``.
        k_mode: how ``alpha`` (the paper's ``k``) is set, the paper's Table 5: ``"input"`` (default, the authors'):
            ``sigmoid(Conv1x1(GAP(x)))`` without bias, per sample and channel; ``"learnable"``: ``sigmoid(theta)``,
            one scalar per layer, initialised to ``k_init``; ``"fixed"``: the constant ``k_init``.
        k_init: ``alpha`` of the fixed mode and the initial ``alpha`` of the learnable one (0.5: the input mode's
            value at initialisation, where the projection is near zero).
    """

    def __init__(self, dim: int, k_mode: KMode = "input", k_init: float = 0.5) -> None:
        super().__init__()
        if k_mode not in K_MODES:
            raise ValueError(f"k_mode must be one of {K_MODES}, got {k_mode!r}")
        if not 0.0 <= k_init <= 1.0 or (k_mode == "learnable" and k_init in (0.0, 1.0)):
            raise ValueError(f"k_init must be in [0, 1] (in (0, 1) for k_mode='learnable'), got {k_init}")
        self.dim = dim
        self.k_mode: KMode = k_mode
        self.k_init = float(k_init)
        self.k_proj = nn.Conv2d(dim, dim, 1, bias=False) if k_mode == "input" else None
        self.k_logit = nn.Parameter(torch.tensor(math.log(k_init / (1 - k_init)))) if k_mode == "learnable" else None

    def extra_repr(self) -> str:
        return f"dim={self.dim}, k_mode={self.k_mode}"

    def rate(self, x: torch.Tensor) -> torch.Tensor:
        """``alpha`` for the input ``x``: ``(B, C, 1, 1)`` in input mode, else a 0-d tensor."""
        if self.k_proj is not None:
            return torch.sigmoid(self.k_proj(x.mean(dim=(2, 3), keepdim=True)))
        if self.k_logit is not None:
            return torch.sigmoid(self.k_logit)
        return x.new_tensor(self.k_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rate(x) * (neighbour_mean(x) - x)


class RefinementMlp(nn.Module):
    """The HcNet authors' RaL branch ``fc2(dwconv(GELU(fc1(x))))``: 1x1 convolutions around GELU and a depthwise 3x3
    filter without bias (``filter=False``: no filter, the paper's Table 6 ablation). NCHW in and out."""

    def __init__(self, dim: int, hidden: int, filter: bool = True) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(dim, hidden, 1)
        self.act = nn.GELU()
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False) if filter else nn.Identity()
        self.fc2 = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dwconv(self.act(self.fc1(x))))


def authors_matched_hidden(dim: int, hidden: int) -> int:
    """Hidden width of a filter-free :class:`RefinementMlp` with about the parameters of the filtered one:
    ``2 dim h + h + dim + 9 h`` with the (bias-free) filter, ``2 dim h' + h' + dim`` without, so ``h'`` is the
    nearest integer to ``h (2 dim + 10) / (2 dim + 1)``."""
    return round(hidden * (2 * dim + 10) / (2 * dim + 1))


class HcRaBlock(nn.Module):
    """The HcNet authors' Hc-Ra block: ``x <- x + DropPath(alpha (mean_8(x) - x))`` (no norm before the heat step,
    ``alpha`` from the block input), then ``x <- x + DropPath(RaL(GroupNorm(x)))``. NCHW in and out.

    Args:
        dim: channels.
        mlp_ratio: RaL hidden width over ``dim`` (4).
        drop_path: stochastic depth of both branches.
        k_mode, k_init: see :class:`NeighbourMeanHeat`.
        ra_filter: the RaL's depthwise filter (``False``: the paper's Table 6 ablation).
        ra_filter_matched: with ``ra_filter=False``, widen the RaL to the filtered one's parameter count
            (:func:`authors_matched_hidden`; the paper compares "with the same number of parameters", how it matched
            them is not in its text or code).
    """

    def __init__(
        self,
        dim: int,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        k_mode: KMode = "input",
        k_init: float = 0.5,
        ra_filter: bool = True,
        ra_filter_matched: bool = True,
    ) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        if not ra_filter and ra_filter_matched:
            hidden = authors_matched_hidden(dim, hidden)
        self.heat = NeighbourMeanHeat(dim, k_mode, k_init)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = GroupNorm1(dim)
        self.mlp = RefinementMlp(dim, hidden, ra_filter)
        self.apply(init_block_conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.heat(x))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class HcStem(nn.Module):
    """The HcNet authors' stem: two 3x3 stride-2 convolutions (with bias), GroupNorm after each, GELU between
    (stride 4). NCHW in and out; PyTorch's default initialisation, as theirs."""

    def __init__(self, in_chans: int, out_chans: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, out_chans // 2, kernel_size=3, stride=2, padding=1)
        self.norm1 = GroupNorm1(out_chans // 2)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(out_chans // 2, out_chans, kernel_size=3, stride=2, padding=1)
        self.norm2 = GroupNorm1(out_chans)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.conv2(self.act(self.norm1(self.conv1(x)))))


class HcDownsample(nn.Module):
    """The HcNet authors' downsampling (their ``PatchMerging``): a 3x3 stride-2 convolution without bias, then
    GroupNorm. NCHW in and out; PyTorch's default initialisation, as theirs."""

    def __init__(self, in_chs: int, out_chs: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=2, padding=1, bias=False)
        self.norm = GroupNorm1(out_chs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))
