"""Spectral token mixers: a field filtered in the 2-D DCT basis by a per-frequency, per-channel transfer function.

:class:`SpectralOperator` holds the machinery that vHeat's Heat Conduction Operator introduced and that every PDE
solved in this basis shares: the ``phi`` projections (depthwise 3x3, then two linear branches), the DCT (matrix or
FFT, any input size), the output norm, SiLU gate and projection, folding of the transfer for one size, and the fused
inference kernels. A subclass supplies only :meth:`SpectralOperator.transfer`, the factors ``T (H, W, C)`` computed
from the Frequency Value Embedding: the heat decay ``exp(-k (wx^2 + wy^2))``
(:class:`~pdevision.layers.HeatConductionOperator`) or WaveFormer's wave factor
(:class:`~pdevision.layers.WavePropagationOperator`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.ops import fused
from pdevision.ops.dct import DctMethod, dct2, idct2, resolve_method

__all__ = ["FUSED_FILTER_MIN_TOKENS", "SpectralOperator", "spectral_filter"]

# Smallest map (H*W tokens) on which the oneDNN heat filter replaces the matrix DCT in inference. It loops over the
# images of a batch and makes two copies per image, which does not pay on small maps. Two interleaved one-thread
# runs on the loaded machine (the second is benchmarks/bench_cpu_perf/ab.md): 0.29x and 0.89x at 24x24, 0.76x and
# 1.41x at 28x28 (batch 8), 1.2x at 48x48, 1.0x and 1.3x at 56x56 (batch 8), 1.4-1.9x from 96x96 to 256x256.
FUSED_FILTER_MIN_TOKENS = 48 * 48


def spectral_filter(u: torch.Tensor, factors: torch.Tensor, method: DctMethod = "auto") -> torch.Tensor:
    """``IDCT2(DCT2(u) * factors)`` over the spatial dims of an NHWC map ``u (B, H, W, C)``, ``factors (H, W, C)``
    (vHeat Eq. 8 for the heat decay), on the kernel the eager operator takes for these inputs: the fused oneDNN filter
    (:func:`~pdevision.ops.fused.heat_filter_nhwc`) where :class:`SpectralOperator` uses it, else the DCT of
    :mod:`pdevision.ops.dct`. An FX leaf, so that a traced operator makes this choice when the graph runs, as eager
    does, and gives the same result bit for bit."""
    h, w = u.shape[1], u.shape[2]
    if _fused_filter_fits(u, h, w, method):
        return fused.heat_filter_nhwc(u, factors.transpose(0, 1).contiguous())
    spec = dct2(u, dims=(1, 2), method=method)
    factors = factors.to(spec.dtype)
    # in place without autograd (the spectrum is a fresh tensor of this call), as the fused inference forward does
    spec = spec * factors if torch.is_grad_enabled() else spec.mul_(factors)
    return idct2(spec, dims=(1, 2), method=method)


def _fused_filter_fits(u: torch.Tensor, h: int, w: int, method: DctMethod) -> bool:
    """Whether the fused oneDNN filter replaces the matrix DCT for ``u`` (float32 only: under bf16 autocast the
    reference DCT products already run on oneDNN, and the filter's two copies per image made it 0.94-1.05x of them
    from 56x56 to 192x192, interleaved, one thread)."""
    if u.dtype != torch.float32 or fused.compute_dtype(u) is None or h * w < FUSED_FILTER_MIN_TOKENS:
        return False
    return resolve_method(method, h, w) == "matrix"


# FX leaves (torchvision's create_feature_extractor, timm's feature_cls="fx"): the DCT depends on concrete sizes, and
# the filter's kernel is chosen at run time; in the graph they are single calls that run with the real tensors.
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
    name), so no FVE projection runs per forward; other resolutions still take the general path.

    Without autograd on the CPU (float32 or bfloat16 autocast) the forward takes the fused oneDNN kernels of
    :mod:`pdevision.ops.fused`: the two branch projections (SiLU fused into the gate's), the spectral filter
    (:func:`~pdevision.ops.fused.heat_filter_nhwc`, in place of the matrix DCT in float32 from
    ``FUSED_FILTER_MIN_TOKENS`` tokens on) and the output projection. Same function;
    :func:`pdevision.ops.fused.reference_kernels` selects the reference path.
    """

    def __init__(self, dim: int, dct_method: DctMethod = "auto") -> None:
        super().__init__()
        self.dim = dim
        self.dct_method: DctMethod = dct_method
        self.register_buffer("k_exp", None)
        self._k_exp_wh: tuple[tuple[int, int], torch.Tensor] | None = None  # k_exp transposed, for the fused filter
        self._cast_cache: dict[object, object] = {}  # bfloat16 copies of the weights (fused.cast_cached)

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
        if fve is None:
            # under an FX trace the sizes are symbolic: a folded operator traces its folded path
            if self.k_exp is not None and (is_fx_symbolic_tracing() or self.k_exp.shape[:2] == (h, w)):
                return self.k_exp
            raise ValueError(
                f"the {type(self).__name__} needs a frequency embedding for a {h}x{w} map "
                f"(folded for {tuple(self.k_exp.shape[:2]) if self.k_exp is not None else 'no size'})"
            )
        return self.transfer(fve)

    @torch.no_grad()
    def fold(self, fve: torch.Tensor) -> None:
        """Precompute the transfer factors for the size of ``fve`` (H, W, C) and use them from now on."""
        h, w = fve.shape[:2]
        self.k_exp = self.factors(h, w, fve.detach()).detach().clone()
        self._cast_cache.clear()  # no cast of earlier factors kept alive (the weights' casts are remade once)

    def unfold(self) -> None:
        """Drop precomputed factors (back to the general path)."""
        self.k_exp = None
        self._cast_cache.clear()

    def _factors_wh(self, h: int, w: int, fve: torch.Tensor | None) -> torch.Tensor:
        """The factors transposed to ``(w, h, C)``, contiguous; cached for the folded ones (keyed on the buffer's
        storage and version, so loading new values into ``k_exp`` is seen)."""
        factors = self.factors(h, w, fve)
        if fve is not None:
            return factors.transpose(0, 1).contiguous()
        key = (factors.data_ptr(), factors._version)
        if self._k_exp_wh is None or self._k_exp_wh[0] != key:
            self._k_exp_wh = (key, factors.transpose(0, 1).contiguous())
        return self._k_exp_wh[1]

    def _factors_cast(self, h: int, w: int, fve: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """The factors in ``dtype``; the folded ones cast once and kept (:func:`~pdevision.ops.fused.cast_cached`)
        instead of on every forward."""
        factors = self.factors(h, w, fve)
        if fve is not None:
            return factors.to(dtype)
        return fused.cast_cached(self._cast_cache, factors, dtype)

    def _forward_fused(self, x: torch.Tensor, fve: torch.Tensor | None) -> torch.Tensor:
        _, h, w, _ = x.shape
        x = fused.conv2d(self.dwconv, x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        d = self.dim
        dtype = fused.compute_dtype(x) or x.dtype
        weight = fused.cast_cached(self._cast_cache, self.linear.weight, dtype)
        bias = fused.cast_cached(self._cast_cache, self.linear.bias, dtype)
        u = fused.linear(x, weight[:d], bias[:d])
        gate = fused.linear(x, weight[d:], bias[d:], act="silu")
        # the choice of spectral_filter, with the folded factors' transposed copy cached
        if _fused_filter_fits(u, h, w, self.dct_method):
            u = fused.heat_filter_nhwc(u, self._factors_wh(h, w, fve))
        else:
            spec = dct2(u, dims=(1, 2), method=self.dct_method)
            # in place: the spectrum and the norm's output are fresh tensors of this call
            u = idct2(spec.mul_(self._factors_cast(h, w, fve, spec.dtype)), dims=(1, 2), method=self.dct_method)
        u = self.out_norm(u).mul_(gate)
        return fused.linear(u, self.out_linear.weight, self.out_linear.bias, cache=self._cast_cache)

    def forward(self, x: torch.Tensor, fve: torch.Tensor | None = None) -> torch.Tensor:
        if fused.compute_dtype(x) is not None:
            return self._forward_fused(x, fve)
        # The general path: autograd, other devices, and recorded graphs. Under an FX trace `fused.linear` and
        # `spectral_filter` are leaves that choose their kernels when the graph runs, as `_forward_fused` does, so a
        # traced operator equals the eager one bit for bit.
        _, h, w, _ = x.shape
        x = fused.conv2d(self.dwconv, x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        # the two branches of `linear` as two products, so each comes out contiguous (no chunk copy); in float32
        # CPU training on oneDNN (fused.linear)
        u = fused.linear(x, self.linear.weight[: self.dim], self.linear.bias[: self.dim])
        gate = fused.linear(x, self.linear.weight[self.dim :], self.linear.bias[self.dim :], act="silu")
        u = spectral_filter(u, self.factors(h, w, fve), self.dct_method)
        u = self.out_norm(u) * gate
        return fused.linear(u, self.out_linear.weight, self.out_linear.bias)
