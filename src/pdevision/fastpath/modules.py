"""Drop-in replacements of plain modules that run on the oneDNN kernels of :mod:`pdevision.fastpath.kernels`.

Each is a subclass of the module it replaces, with the same parameters, buffers and state-dict keys, computing the
same function; :func:`pdevision.fastpath.accelerate` swaps them in by changing a module's class, so nothing is copied
and the model's weights stay shared. Where the kernels do not apply (autograd in bfloat16, another device, a trace, a
dispatch mode, :func:`~pdevision.fastpath.kernels.no_fused_kernels`) each runs its parent's plain forward.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import Mlp
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.fastpath import kernels
from pdevision.layers.hcl import HcRaBlock, RefinementMlp
from pdevision.layers.hyperbolic import DerivativeConv
from pdevision.layers.spectral import SpectralOperator, spectral_filter
from pdevision.ops.dct import dct2, idct2, resolve_method

__all__ = [
    "FUSED_FILTER_MIN_TOKENS",
    "ChunkedMlp",
    "FusedConv2d",
    "FusedDerivativeConv",
    "FusedHcRaBlock",
    "FusedLinear",
    "FusedSpectralOperator",
    "fused_spectral_class",
]

# Smallest map (H*W tokens) on which the oneDNN heat filter replaces the matrix DCT in inference. It loops over the
# images of a batch and makes two copies per image, which does not pay on small maps. Two interleaved one-thread
# runs on the loaded machine (the second is benchmarks/fused_kernels_ab): 0.29x and 0.89x at 24x24, 0.76x and
# 1.41x at 28x28 (batch 8), 1.2x at 48x48, 1.0x and 1.3x at 56x56 (batch 8), 1.4-1.9x from 96x96 to 256x256.
FUSED_FILTER_MIN_TOKENS = 48 * 48


def _cache(module: nn.Module) -> dict[Any, Any]:
    """The module's cache of weights cast to bfloat16 (:func:`~pdevision.fastpath.kernels.cast_cached`)."""
    return module.__dict__.setdefault("_cast_cache", {})


class FusedLinear(nn.Linear):
    """``act(linear(x))`` on :func:`pdevision.fastpath.kernels.linear`: without autograd one oneDNN product with the
    activation fused (``act``: ``"none"``, ``"gelu"``, ``"silu"``); in float32 training the forward and both
    gradient products on oneDNN. ``(..., in_features)`` in, ``(..., out_features)`` out."""

    act: str = "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cache = None if is_fx_symbolic_tracing() else _cache(self)  # not a graph constant
        return kernels.linear(x, self.weight, self.bias, self.act, cache=cache)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", act={self.act}" if self.act != "none" else "")


class FusedConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose weights are cast to bfloat16 once and kept, under bfloat16 autocast without autograd,
    instead of cast by autocast on every forward (the same bfloat16 values, so the same result). NCHW in and out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = kernels.compute_dtype(x)
        if dtype is None or dtype == self.weight.dtype:
            return super().forward(x)
        weight = kernels.cast_cached(_cache(self), self.weight, dtype)
        bias = kernels.cast_cached(_cache(self), self.bias, dtype) if self.bias is not None else None
        with torch.autocast("cpu", enabled=False):
            return self._conv_forward(x.to(dtype), weight, bias)


class ChunkedMlp(Mlp):
    """timm's token-wise ``Mlp`` that, without autograd, runs on chunks of at most ``chunk`` tokens: the same result,
    with a small reused hidden buffer instead of a ``4 x`` wide one over the whole map (less peak memory and fewer
    page faults at high resolution). ``(..., C)`` in and out."""

    chunk: int = 16384

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or is_fx_symbolic_tracing() or x.numel() <= self.chunk * x.shape[-1]:
            return super().forward(x)
        flat = x.reshape(-1, x.shape[-1])
        out = torch.empty_like(flat)
        for start in range(0, flat.shape[0], self.chunk):
            out[start : start + self.chunk] = super().forward(flat[start : start + self.chunk])
        return out.reshape(x.shape)


class FusedDerivativeConv(DerivativeConv):
    """PDE-ResNet's derivative filters (:class:`~pdevision.layers.hyperbolic.DerivativeConv`, one shared bank of
    ``splits`` kernels) on the kernels, in inference on the CPU under bfloat16 autocast: each input channel is filtered
    as an image of its own (one ``1 -> splits`` convolution over ``B * C`` single-channel images), which gives the
    plain forward's ``(B, C * splits, H', W')`` tensor in the same order (channel ``j * splits + a`` is kernel ``a``
    of input ``j``) without copying the bank into one kernel per channel on every forward. Faster in bfloat16 and
    slower in float32 on the record's machine (``benchmarks/pderesnet_profile``), so float32 runs the plain forward,
    as do per-channel kernels (``shared=False``), a bank that is not one kernel per split, training, autograd, other
    devices and traces. NCHW in and out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = kernels.compute_dtype(x)
        if (
            dtype != torch.bfloat16
            or not self.shared
            or self.bank != self.splits
            or x.dtype not in (torch.float32, dtype)
        ):
            return super().forward(x)
        b, c, h, w = x.shape
        weight = kernels.cast_cached(_cache(self), self.weight, dtype)
        with torch.autocast("cpu", enabled=False):
            y = F.conv2d(x.to(dtype).reshape(b * c, 1, h, w), weight, None, self.stride, 1)
        return y.reshape(b, c * self.splits, y.shape[-2], y.shape[-1])


class FusedHcRaBlock(HcRaBlock):
    """The HcNet authors' Hc-Ra block (:class:`~pdevision.layers.hcl.HcRaBlock`) on the kernels, in inference on the
    CPU in float32 or under bfloat16 autocast: NHWC memory inside (NCHW tensors in channels-last memory in and out),
    ``alpha``'s 1x1 projection of the pooled map as a float32 matrix-vector product rounded to the stream's dtype, the
    heat step as :func:`~pdevision.fastpath.kernels.neighbour_heat_nhwc`, GroupNorm on the channels-last map, the
    RaL's 1x1 convolutions as oneDNN products (weights cast once; the residual sum fused into the second) and its
    depthwise filter on the channels-last map. The RaL's GELU is the first product's post-op, as in every MLP on the
    fast path (:func:`~pdevision.fastpath.accelerate`). Under autocast the block computes in the dtypes
    autocast gives the plain one. Elsewhere (training mode, autograd, other devices, traces,
    :func:`~pdevision.fastpath.kernels.no_fused_kernels`) the plain forward. Swapped in only where the RaL is a
    :class:`~pdevision.layers.hcl.RefinementMlp` (1x1 convolutions around the activation and filter) whose activation
    is the exact GELU."""

    mlp: RefinementMlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = kernels.compute_dtype(x)  # traces, autograd, other devices first: None
        if self.training or dtype is None or x.dtype not in (torch.float32, dtype):
            return super().forward(x)
        xh = x.permute(0, 2, 3, 1)
        y = kernels.neighbour_heat_nhwc(xh if xh.is_contiguous() else xh.contiguous(), self._rate(xh))
        z = self.norm2(y.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        fc1, fc2 = self.mlp.fc1, self.mlp.fc2
        w1, b1, w2, b2 = (
            None if t is None else kernels.cast_cached(_cache(self), t, dtype)
            for t in (fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        )
        h = kernels.linear(z, w1.flatten(1), b1, act="gelu")  # the exact GELU (RefinementMlp's act) as a post-op
        h = self.mlp.dwconv(h.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return kernels.linear_add(h, w2.flatten(1), b2, y).permute(0, 3, 1, 2)

    def _rate(self, xh: torch.Tensor) -> torch.Tensor:
        """``alpha`` for the NHWC input ``xh``, in its dtype: ``(B, 1, 1, C)`` in the input mode, else the heat step's
        0-d one."""
        proj = self.heat.k_proj
        if proj is None:
            return self.heat.rate(xh)
        # a matrix-vector product per sample, in float32: PyTorch's own (oneDNN's call costs more than the product
        # here, and autocast would cast the weight on every call)
        with torch.autocast("cpu", enabled=False):
            pooled = xh.mean(dim=(1, 2), dtype=torch.float32)
            alpha = torch.sigmoid(F.linear(pooled, proj.weight.flatten(1), proj.bias))
        return alpha.to(xh.dtype)[:, None, None, :]


def _fused_filter_fits(u: torch.Tensor, h: int, w: int, method: str) -> bool:
    """Whether the fused oneDNN filter replaces the matrix DCT for ``u`` (float32 only: under bf16 autocast the
    plain DCT products already run on oneDNN, and the filter's two copies per image made it 0.94-1.05x of them
    from 56x56 to 192x192, interleaved, one thread)."""
    if u.dtype != torch.float32 or kernels.compute_dtype(u) is None or h * w < FUSED_FILTER_MIN_TOKENS:
        return False
    return resolve_method(method, h, w) == "matrix"  # type: ignore[arg-type]


def fused_filter(u: torch.Tensor, factors: torch.Tensor, method: str) -> torch.Tensor:
    """:func:`~pdevision.layers.spectral.spectral_filter` on the kernel the fused operator takes for these inputs: the
    fused oneDNN filter on large float32 maps in inference, else the DCT. An FX leaf, so that a traced operator makes
    this choice when the graph runs, as eager does."""
    h, w = u.shape[1], u.shape[2]
    if _fused_filter_fits(u, h, w, method):
        return kernels.heat_filter_nhwc(u, factors.transpose(0, 1).contiguous())
    return spectral_filter(u, factors, method)  # type: ignore[arg-type]


torch.fx.wrap("fused_filter")


class FusedSpectralOperator(SpectralOperator):
    """The forward of a :class:`~pdevision.layers.spectral.SpectralOperator` on the kernels, mixed into its class by
    :func:`fused_spectral_class` (the transfer, the parameters and the state dict stay the subclass's).

    Without autograd on the CPU (float32, or bfloat16 autocast): the two branch projections as two oneDNN products
    (SiLU fused into the gate's), the spectral filter (:func:`~pdevision.fastpath.kernels.heat_filter_nhwc` in place
    of the matrix DCT in float32 from ``FUSED_FILTER_MIN_TOKENS`` tokens on), the output projection; the weights and
    folded factors cast to bfloat16 once and kept. Otherwise (training, other devices, traces) the same two-product
    layout on :func:`~pdevision.fastpath.kernels.linear`, which takes oneDNN in float32 CPU training."""

    def fold(self, fve: torch.Tensor) -> None:
        super().fold(fve)
        _cache(self).clear()  # no cast of earlier factors kept alive
        self.__dict__.pop("_k_exp_wh", None)

    def unfold(self) -> None:
        super().unfold()
        _cache(self).clear()
        self.__dict__.pop("_k_exp_wh", None)

    def _factors_wh(self, h: int, w: int, fve: torch.Tensor | None) -> torch.Tensor:
        """The factors transposed to ``(w, h, C)``, contiguous; cached for the folded ones (keyed on the buffer's
        storage and version, so loading new values into ``k_exp`` is seen)."""
        factors = self.factors(h, w, fve)
        if fve is not None:
            return factors.transpose(0, 1).contiguous()
        key = (factors.data_ptr(), factors._version)
        cached = self.__dict__.get("_k_exp_wh")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_k_exp_wh"] = (key, factors.transpose(0, 1).contiguous())
        return cached[1]

    def _branches(self, x: torch.Tensor, dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``phi``: the depthwise conv, then the filtered branch and the SiLU of the gate, each one product (so each
        comes out contiguous, with no chunk copy)."""
        x = self.dwconv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        weight, bias, d = self.linear.weight, self.linear.bias, self.dim
        if dtype is not None:
            weight, bias = (
                kernels.cast_cached(_cache(self), weight, dtype),
                kernels.cast_cached(_cache(self), bias, dtype),
            )
        u = kernels.linear(x, weight[:d], bias[:d])
        gate = kernels.linear(x, weight[d:], bias[d:], act="silu")
        return u, gate

    def _forward_inference(self, x: torch.Tensor, fve: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        _, h, w, _ = x.shape
        u, gate = self._branches(x, dtype)
        if _fused_filter_fits(u, h, w, self.dct_method):
            u = kernels.heat_filter_nhwc(u, self._factors_wh(h, w, fve))
        else:
            spec = dct2(u, dims=(1, 2), method=self.dct_method)
            factors = self.factors(h, w, fve)
            factors = (
                factors.to(spec.dtype) if fve is not None else kernels.cast_cached(_cache(self), factors, spec.dtype)
            )
            # in place: the spectrum and the norm's output are fresh tensors of this call
            u = idct2(spec.mul_(factors), dims=(1, 2), method=self.dct_method)
        u = self.out_norm(u).mul_(gate)
        return kernels.linear(u, self.out_linear.weight, self.out_linear.bias, cache=_cache(self))

    def forward(self, x: torch.Tensor, fve: torch.Tensor | None = None) -> torch.Tensor:
        dtype = kernels.compute_dtype(x)
        if dtype is not None:
            return self._forward_inference(x, fve, dtype)
        _, h, w, _ = x.shape
        u, gate = self._branches(x, None)
        u = fused_filter(u, self.factors(h, w, fve), self.dct_method)
        return kernels.linear(self.out_norm(u) * gate, self.out_linear.weight, self.out_linear.bias)


@functools.cache
def fused_spectral_class(cls: type[SpectralOperator]) -> type[SpectralOperator]:
    """``cls`` with :class:`FusedSpectralOperator`'s forward (a subclass of both, made once per class)."""
    if issubclass(cls, FusedSpectralOperator):
        return cls
    return type(f"Fused{cls.__name__}", (FusedSpectralOperator, cls), {"__module__": __name__})
