"""The PDE operators as token mixers for timm's MetaFormer (the PoolFormer / ConvFormer / CAFormer skeleton).

timm's ``MetaFormerBlock`` builds its mixer as ``token_mixer(dim=dim, proj_drop=proj_drop, device=..., dtype=...,
**kwargs)``, the remaining ``MetaFormer`` keyword arguments passed to every mixer, and runs it on NCHW maps (every
mixer that is not timm's ``Attention``). Each class here takes that signature and layout:

- :class:`HeatMixer`: vHeat's Heat Conduction Operator with its own Frequency Value Embedding;
- :class:`WaveMixer`: WaveFormer's Wave Propagation Operator with its own FVE;
- :class:`HcLMixer`: HcNet's heat-conduction mixer (linear, explicit heat step, linear);
- :class:`HyperbolicMixer`: the branch of PDE-ResNet's hyperbolic block (one explicit step of a quasi-linear
  hyperbolic system, BatchNorm), without its shortcut (the MetaFormer block has the residual);
- the local controls, ConvFormer's inverted separable form (timm's ``SepConv``: pointwise up, StarReLU, a spatial
  operation, pointwise down) around a spatial operation that reaches one token a block or none:
  :class:`PointwiseMixer` (none: each token on its own), :class:`AvgPoolMixer` (PoolFormer's 3x3 average minus
  identity) and :class:`DepthwiseMixer` (a depthwise 3x3 convolution). The pointwise layers give them about the
  parameters of the PDE mixers and of attention, so that a comparison holds the parameters fixed.

In vHeat and WaveFormer one FVE serves a whole stage at the stage's size. A MetaFormer mixer does not know the size
of its map when it is built, so each spectral mixer holds an FVE on an ``fve_size x fve_size`` frequency grid and
resamples it to the map's size in every forward (:func:`~pdevision.ops.resize_spectrum`, linear in the physical
frequency ``w = n pi / N``; unchanged where the map has ``fve_size`` frequencies).
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import trunc_normal_
from timm.models.metaformer import Pooling, SepConv
from torch import nn

from pdevision._values import is_int
from pdevision.layers.hcl import HeatConductionMixer
from pdevision.layers.hco import HeatConductionOperator
from pdevision.layers.hyperbolic import HyperbolicBlock
from pdevision.layers.spectral import SpectralOperator
from pdevision.layers.wave import WavePropagationOperator
from pdevision.ops.dct import DctMethod
from pdevision.ops.heat import resize_spectrum

__all__ = [
    "AvgPoolMixer",
    "DepthwiseMixer",
    "HcLMixer",
    "HeatMixer",
    "HyperbolicMixer",
    "PointwiseMixer",
    "WaveMixer",
    "mixer_fve",
]


# The largest FVE grid: the map of a 4096 px image at stride 16 (an FVE of n x n x C per mixer; far larger ones would
# allocate gigabytes before anything useful).
MAX_FVE_SIZE = 256


def mixer_fve(freq_embed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The FVE ``(n, n, C)`` resampled to the size of the NCHW map ``x``: ``(H, W, C)``."""
    return resize_spectrum(freq_embed, (x.shape[2], x.shape[3]), "interp")


# An FX leaf: the resampling depends on concrete sizes.
torch.fx.wrap("mixer_fve")


def _place(module: nn.Module, device: Any, dtype: Any) -> None:
    if device is not None or dtype is not None:
        module.to(device=device, dtype=dtype)


class _SpectralMixer(nn.Module):
    """A spectral operator with its own FVE, NCHW in and out, then dropout (``proj_drop``)."""

    def __init__(self, dim: int, op: SpectralOperator, fve_size: int, proj_drop: float, fve_std: float) -> None:
        super().__init__()
        if not (is_int(fve_size) and 1 <= fve_size <= MAX_FVE_SIZE):
            raise ValueError(f"fve_size must be an integer from 1 to {MAX_FVE_SIZE}, got {fve_size!r}")
        self.op = op
        self.freq_embed = nn.Parameter(torch.zeros(fve_size, fve_size, dim))
        trunc_normal_(self.freq_embed, std=fve_std)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fve = mixer_fve(self.freq_embed, x)
        y = self.op(x.permute(0, 2, 3, 1), fve)
        return self.proj_drop(y.permute(0, 3, 1, 2))


class HeatMixer(_SpectralMixer):
    """vHeat's HCO as a MetaFormer token mixer (vHeat Eq. 8-10): ``IDCT2(DCT2(phi(x)) exp(-k(w) |w|^2))``, SiLU-gated.
    NCHW in and out. ``fve_size``: the side of the FVE's frequency grid; ``k_mode`` and ``k_init``: see
    :class:`~pdevision.layers.HeatConductionOperator`."""

    def __init__(
        self,
        dim: int,
        proj_drop: float = 0.0,
        fve_size: int = 14,
        k_mode: str = "fve",
        k_init: float | None = None,
        dct_method: DctMethod = "auto",
        device: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        op = HeatConductionOperator(dim, dct_method=dct_method, k_mode=k_mode, k_init=k_init)
        super().__init__(dim, op, fve_size, proj_drop, fve_std=0.02)
        _place(self, device, dtype)


class WaveMixer(_SpectralMixer):
    """WaveFormer's wave operator as a MetaFormer token mixer: ``IDCT2(DCT2(phi(x)) (cos(ct) + (1 + a/2) sin(ct)/c))``,
    SiLU-gated (:class:`~pdevision.layers.WavePropagationOperator`; ``time_init`` as there). NCHW in and out."""

    def __init__(
        self,
        dim: int,
        proj_drop: float = 0.0,
        fve_size: int = 14,
        time_init: float = 0.0,
        dct_method: DctMethod = "auto",
        device: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        op = WavePropagationOperator(dim, dct_method=dct_method, time_init=time_init)
        super().__init__(dim, op, fve_size, proj_drop, fve_std=0.015)
        _place(self, device, dtype)


class HcLMixer(nn.Module):
    """HcNet's token mixer ``Linear(HcL(Linear(x)))`` for MetaFormer (HcNet's heat-conduction layer, an explicit step
    ``z + k (N(z) - W z)`` with ``k = sigmoid(Linear(GAP(z)))``). NCHW in and out; ``hcl_steps``: explicit sub-steps
    per layer; ``hcl_k_mode`` and ``hcl_k_init``: how ``k`` is set (HcNet's ablation; see
    :class:`~pdevision.layers.HeatConductionLayer`); ``hcl_hidden``: the channels the heat step runs on (default
    ``dim``, HcNet's form; wider only to hold a comparison's parameters fixed)."""

    def __init__(
        self,
        dim: int,
        proj_drop: float = 0.0,
        hcl_steps: int = 1,
        hcl_k_mode: str = "input",
        hcl_k_init: float = 0.5,
        hcl_hidden: int | None = None,
        device: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        hidden = dim if hcl_hidden is None else hcl_hidden
        if not (is_int(hidden) and hidden >= 1):
            raise ValueError(f"hcl_hidden must be a positive integer, got {hcl_hidden!r}")
        self.mixer = HeatConductionMixer(hidden, steps=hcl_steps, k_mode=hcl_k_mode, k_init=hcl_k_init)
        if hidden != dim:  # Linear(dim -> hidden), the heat step on hidden channels, Linear(hidden -> dim)
            self.mixer.proj_in, self.mixer.proj_out = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        _place(self, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_drop(self.mixer(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


class HyperbolicMixer(nn.Module):
    """PDE-ResNet's hyperbolic step as a MetaFormer token mixer: ``BN(r(u))``, the branch of
    :class:`~pdevision.layers.HyperbolicBlock` (Liu et al. Eq. 3 by default: derivatives as a shared bank of depthwise
    3x3 kernels, coefficient matrices as 1x1 convolutions, the product of the two branches as the nonlinearity).
    NCHW in and out; the block's identity shortcut is not used (the MetaFormer block adds the residual)."""

    def __init__(
        self,
        dim: int,
        proj_drop: float = 0.0,
        equation: str = "eq3",
        expansion: int = 4,
        device: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.block = HyperbolicBlock(dim, dim, equation=equation, expansion=expansion, projection=False)
        self.proj_drop = nn.Dropout(proj_drop)
        _place(self, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.block.norm(self.block.residual(x))
        return self.proj_drop(r)


class _SeparableMixer(SepConv):
    """timm's ``SepConv`` (ConvFormer's inverted separable form: ``pw_down(spatial(StarReLU(pw_up(x))))``) with
    ``spatial`` in place of its 7x7 depthwise convolution; ``expansion``: the hidden width over ``dim``. NCHW."""

    def __init__(
        self, dim: int, spatial: nn.Module | None, expansion: float, device: Any = None, dtype: Any = None
    ) -> None:
        if not (isinstance(expansion, (int, float)) and not isinstance(expansion, bool) and expansion > 0):
            raise ValueError(f"sep_expansion must be a positive number, got {expansion!r}")
        super().__init__(dim, expansion_ratio=expansion, kernel_size=3, padding=1, device=device, dtype=dtype)
        if spatial is not None:
            self.dwconv = spatial


class PointwiseMixer(_SeparableMixer):
    """The no-reach control: ``pw_down(StarReLU(pw_up(x)))`` per token (the separable form without its spatial
    filter, an MLP on each token). Sees one token; ``sep_expansion``: hidden width over ``dim``. NCHW."""

    def __init__(self, dim: int, sep_expansion: float = 2.0, device: Any = None, dtype: Any = None, **kwargs: Any):
        super().__init__(dim, nn.Identity(), sep_expansion, device, dtype)


class AvgPoolMixer(_SeparableMixer):
    """The pooling control: PoolFormer's ``AvgPool3x3(z) - z`` inside the separable form. Reaches one token a
    block. NCHW."""

    def __init__(self, dim: int, sep_expansion: float = 2.0, device: Any = None, dtype: Any = None, **kwargs: Any):
        super().__init__(dim, Pooling(3), sep_expansion, device, dtype)


class DepthwiseMixer(_SeparableMixer):
    """The local-convolution control: ConvFormer's ``SepConv`` with a depthwise 3x3 kernel instead of 7x7. Reaches
    one token a block. NCHW."""

    def __init__(self, dim: int, sep_expansion: float = 2.0, device: Any = None, dtype: Any = None, **kwargs: Any):
        super().__init__(dim, None, sep_expansion, device, dtype)
