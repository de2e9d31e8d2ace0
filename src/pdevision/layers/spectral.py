"""Spectral token mixers: a field filtered in the 2-D DCT basis by a per-frequency, per-channel transfer function.

:class:`SpectralOperator` holds what vHeat's Heat Conduction Operator introduced and every PDE solved in this basis
shares: the ``phi`` projections (depthwise 3x3, then a linear map to two branches), the DCT (matrix or FFT, any input
size), the output norm, SiLU gate and projection, and folding of the transfer for one size. A subclass supplies only
:meth:`SpectralOperator.transfer`, the factors ``T (H, W, C)`` computed from the Frequency Value Embedding: the heat
decay ``exp(-k (wx^2 + wy^2))`` (:class:`~pdevision.layers.HeatConductionOperator`) or WaveFormer's wave factor
(:class:`~pdevision.layers.WavePropagationOperator`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.ops.dct import DctMethod, dct2, idct2

__all__ = ["SpectralOperator", "spectral_filter"]


def spectral_filter(u: torch.Tensor, factors: torch.Tensor, method: DctMethod = "auto") -> torch.Tensor:
    """``IDCT2(DCT2(u) * factors)`` over the spatial dims of an NHWC map ``u (B, H, W, C)``, ``factors (H, W, C)``
    (vHeat Eq. 8 for the heat decay)."""
    spec = dct2(u, dims=(1, 2), method=method)
    return idct2(spec * factors.to(spec.dtype), dims=(1, 2), method=method)


# FX leaves (torchvision's create_feature_extractor, timm's feature_cls="fx"): the DCT depends on concrete sizes; in
# the graph they are single calls that run with the real tensors.
torch.fx.wrap("dct2")
torch.fx.wrap("idct2")
torch.fx.wrap("spectral_filter")


class SpectralOperator(nn.Module):
    """``u = IDCT2(DCT2(phi(x)) * T)`` gated by SiLU, with the transfer ``T (H, W, C)`` given by a subclass.

    ``phi`` is a depthwise 3x3 conv then a linear map to two branches; one branch is filtered in the DCT basis,
    layer-normalised, and gated by SiLU of the other branch; a final linear map mixes channels (vHeat Eq. 8-10; the
    same layout in WaveFormer's code).

    Input and output: NHWC ``(B, H, W, C)``. The Frequency Value Embedding ``fve`` is ``(H, W, C)``.

    A subclass builds its parameters in ``__init__`` in this order (the order of vHeat's, so that a seed gives the
    same initial weights as before the split): :meth:`_build_input`, its own transfer parameters, then
    :meth:`_build_output`; and implements :meth:`transfer`.

    After :meth:`fold` the transfer factors for one resolution are precomputed (buffer ``k_exp``, the vHeat authors'
    name), so no FVE projection runs per forward; other resolutions still take the general path. The CPU kernels
    that run the same function faster are applied from outside, by :func:`pdevision.fastpath.accelerate`.
    """

    def __init__(self, dim: int, dct_method: DctMethod = "auto") -> None:
        super().__init__()
        self.dim = dim
        self.dct_method: DctMethod = dct_method
        self.register_buffer("k_exp", None)

    def _build_input(self) -> None:
        self.dwconv = nn.Conv2d(self.dim, self.dim, kernel_size=3, padding=1, groups=self.dim)
        self.linear = nn.Linear(self.dim, 2 * self.dim)

    def _build_output(self) -> None:
        self.out_norm = nn.LayerNorm(self.dim)
        self.out_linear = nn.Linear(self.dim, self.dim)

    def transfer(self, fve: torch.Tensor) -> torch.Tensor:
        """The transfer factors ``(H, W, C)`` for the FVE ``fve (H, W, C)`` of the map's size."""
        raise NotImplementedError

    def factors(self, h: int, w: int, fve: torch.Tensor | None) -> torch.Tensor:
        """Transfer factors of shape ``(h, w, C)``: from ``fve`` when given (so training after folding still reaches
        the FVE and projection), else the folded factors."""
        if fve is not None:
            return self.transfer(fve)
        # under an FX trace the sizes are symbolic: a folded operator traces its folded path
        if self.k_exp is not None and (is_fx_symbolic_tracing() or self.k_exp.shape[:2] == (h, w)):
            return self.k_exp
        raise ValueError(
            f"the {type(self).__name__} needs a frequency embedding for a {h}x{w} map "
            f"(folded for {tuple(self.k_exp.shape[:2]) if self.k_exp is not None else 'no size'})"
        )

    @torch.no_grad()
    def fold(self, fve: torch.Tensor) -> None:
        """Precompute the transfer factors for the size of ``fve`` (H, W, C) and use them from now on."""
        self.k_exp = self.transfer(fve.detach()).detach().clone()

    def unfold(self) -> None:
        """Drop precomputed factors (back to the general path)."""
        self.k_exp = None

    def forward(self, x: torch.Tensor, fve: torch.Tensor | None = None) -> torch.Tensor:
        _, h, w, _ = x.shape
        x = self.dwconv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        u, gate = self.linear(x).chunk(2, dim=-1)
        u = spectral_filter(u, self.factors(h, w, fve), self.dct_method)
        return self.out_linear(self.out_norm(u) * F.silu(gate))
