"""CPU kernels on oneDNN: linear layers with fused activations and the spectral operators' DCT filter.

The only place in the library that calls private torch ops. The modules of :mod:`pdevision.fastpath.modules` call
these functions; :func:`pdevision.fastpath.accelerate` puts those modules into a model; the bench measures the
machine's oneDNN rate through :func:`onednn_mm`.

Why: on CPUs where PyTorch's BLAS (MKL) does not take its fastest code path (on the AMD EPYC development
machine MKL's ``sgemm`` ran at about 105 GFLOP/s per thread, oneDNN's matrix product at about 230;
``benchmarks/bench_cpu_perf/``), the matrix products of linear layers and of the matrix DCT are the
bulk of a forward pass. oneDNN is the library PyTorch already uses for its CPU convolutions; this module
reaches its inner-product primitive through ``torch.ops.mkldnn._linear_pointwise`` (the op that
``torch.compile`` emits for CPU linear layers), with an activation fused into the product.

The kernels run only where they compute the same function as the plain path: CPU tensors in
float32 or bfloat16, no autograd recording, no tracing or dispatch mode (FLOP counters see the reference
path), oneDNN available. With autograd, a float32 linear layer on the CPU (no autocast) runs its forward product
and its input-gradient and weight-gradient products on oneDNN too (:func:`linear`; training). Everywhere else the
callers take their plain path, and :func:`no_fused_kernels` forces it (to compare, or to rule the kernels out).
Results agree with the plain path to float32 rounding (tested to 1e-4 on the logits of folded models, and on
the gradients of a training step).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx._symbolic_trace import is_fx_symbolic_tracing
from torch.utils._python_dispatch import _get_current_dispatch_mode

from pdevision.ops.dct import dct_matrix
from pdevision.ops.fdm import neighbour_count

_ENABLED = True
ACTIVATIONS = ("none", "gelu", "silu")


def set_fused_kernels(enabled: bool) -> None:
    """Allow (default) or forbid the oneDNN inference kernels for the whole process."""
    global _ENABLED
    _ENABLED = bool(enabled)


@contextlib.contextmanager
def no_fused_kernels() -> Iterator[None]:
    """Within the block, every caller of this module takes its reference (plain PyTorch) path."""
    global _ENABLED
    previous, _ENABLED = _ENABLED, False
    try:
        yield
    finally:
        _ENABLED = previous


@functools.cache
def onednn_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether oneDNN's fused linear runs here in ``dtype`` (bfloat16 needs CPU instructions, AVX-512 or AMX, that
    not every machine has: without them oneDNN cannot create the primitive)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:  # the op exists in builds with oneDNN; check it runs once
        x = torch.ones(1, 2, dtype=dtype)
        torch.ops.mkldnn._linear_pointwise(x, torch.ones(2, 2, dtype=dtype), None, "none", [], "")
    except (RuntimeError, AttributeError):
        return False
    return True


def _usable(x: torch.Tensor) -> bool:
    """The conditions shared by the inference and training kernels (see the module docstring)."""
    if not _ENABLED or torch.compiler.is_compiling() or torch.jit.is_scripting() or torch.jit.is_tracing():
        return False
    if is_fx_symbolic_tracing() or torch._C._are_functorch_transforms_active():  # torch.func: reference ops
        return False
    if x.device.type != "cpu" or not torch.backends.mkldnn.enabled:
        return False
    return _get_current_dispatch_mode() is None  # e.g. FlopCounterMode: let it see the reference ops


def compute_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype the fused kernels would compute ``x`` in (autocast's bfloat16 when active), or ``None`` when
    they do not apply (see the module docstring)."""
    if torch.is_grad_enabled() or not _usable(x):
        return None
    dtype = x.dtype
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
    if dtype not in (torch.float32, torch.bfloat16) or not onednn_available(dtype):
        return None
    return dtype


def _act(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu":
        return F.gelu(y)
    if act == "silu":
        return F.silu(y)
    return y


_ONEDNN_ACT = {"none": ("none", ""), "gelu": ("gelu", "none"), "silu": ("swish", "")}


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    act: str = "none",
    cache: dict[Any, Any] | None = None,
) -> torch.Tensor:
    """``act(F.linear(x, weight, bias))`` over the last dimension, ``act`` in ``"none"``, ``"gelu"`` (exact, erf),
    ``"silu"``; one oneDNN product with the bias and activation fused where :func:`compute_dtype` allows, under
    autocast in its dtype (as ``F.linear`` would be). ``cache``: a dict of the caller's for the cast weights
    (:func:`cast_cached`)."""
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")
    dtype = compute_dtype(x)
    if dtype is None:
        if _trains_on_onednn(x, weight, bias):
            return _act(_TrainingLinear.apply(x, weight, bias), act)
        return _act(F.linear(x, weight, bias), act)
    name, algorithm = _ONEDNN_ACT[act]
    if cache is not None:
        weight = cast_cached(cache, weight, dtype)
        bias = cast_cached(cache, bias, dtype) if bias is not None else None
    b = bias.to(dtype) if bias is not None else None
    return torch.ops.mkldnn._linear_pointwise(x.to(dtype), weight.to(dtype), b, name, [], algorithm)


def linear_add(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, other: torch.Tensor) -> torch.Tensor:
    """``other + F.linear(x, weight, bias)`` over the last dimension (a residual branch's output product): one oneDNN
    product with the sum fused into it where :func:`compute_dtype` of ``x`` is the dtype of ``x``, ``weight``,
    ``bias`` and ``other`` alike (float32; bfloat16 under autocast, with weights the caller cast), else the plain sum
    (autocast's product, then the sum in the promoted dtype). ``other`` has the output's shape."""
    dtype = compute_dtype(x)
    tensors = (x, weight, other) if bias is None else (x, weight, bias, other)
    if dtype is None or any(t.dtype != dtype for t in tensors):
        return other + F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise.binary(x, other.contiguous(), weight, bias, "add")


# An FX leaf (torchvision's create_feature_extractor, timm's feature_cls="fx" and FX tests): the kernel is chosen when
# the graph runs, as in eager mode, so that a traced model computes the same values bit for bit. (Traced through, the
# trace would record the reference product whatever the graph later runs under.)
torch.fx.wrap("linear")


def _trains_on_onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """A float32 CPU linear layer recorded by autograd, outside autocast, where the kernels apply."""
    if not torch.is_grad_enabled() or torch.is_autocast_enabled("cpu") or not _usable(x):
        return False
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors) or x.ndim < 2:
        return False
    if x.numel() == 0 or weight.numel() == 0:  # oneDNN has no primitive for an empty product
        return False
    return onednn_available()


class _TrainingLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` with the forward product and both gradient products on oneDNN (float32, CPU).

    The weight gradient ``grad^T @ x`` is computed as ``(x^T @ grad)^T`` when the layer widens (more outputs than
    inputs): oneDNN ran ``grad^T @ x`` at a third of the speed for those shapes on the development machine. Second
    derivatives are not supported (``once_differentiable``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_mm(grad, weight.t())  # grad @ W
        g2, x2 = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
        if ctx.needs_input_grad[1]:
            if weight.shape[0] > weight.shape[1]:  # widening: (x^T @ grad)^T
                grad_w = onednn_mm(x2.t(), g2.t()).t().contiguous()
            else:
                grad_w = onednn_mm(g2.t(), x2.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b


def fused_optimizer_supported(params: Iterable[torch.Tensor]) -> bool:
    """Whether PyTorch's fused optimizer update (Adam, AdamW, SGD with ``fused=True``) takes these parameters:
    floating point, on the CPU or a CUDA device. The training loop and the bench's training step ask the same."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def cast_cached(cache: dict[Any, Any], t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)``, kept in ``cache`` (a dict owned by the calling module) while ``t`` is the same tensor at
    the same version: bfloat16 copies of the weights are made once, not every forward; an in-place update (an
    optimizer step, ``load_state_dict``) bumps the version and renews the copy."""
    if t.dtype == dtype:
        return t
    entry = cache.get((id(t), dtype))
    if entry is not None and entry[0] is t and entry[1] == t._version:
        return entry[2]
    cast = t.detach().to(dtype)
    cache[(id(t), dtype)] = (t, t._version, cast)
    return cast


@functools.lru_cache(maxsize=64)
def _bases(h: int, w: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    ch, cw = dct_matrix(h, dtype=dtype), dct_matrix(w, dtype=dtype)
    return ch, cw, ch.t().contiguous(), cw.t().contiguous()


def onednn_mm(a: torch.Tensor, b_t: torch.Tensor) -> torch.Tensor:
    """``a @ b_t.T`` on oneDNN (``b_t`` may be a transposed view: it is read in place)."""
    return torch.ops.mkldnn._linear_pointwise(a, b_t, None, "none", [], "")


def heat_filter_nhwc(u: torch.Tensor, decay_wh: torch.Tensor) -> torch.Tensor:
    """``IDCT2(DCT2(u) * decay)`` over the spatial dims of an NHWC map ``u (B, H, W, C)`` (vHeat Eq. 8), with the
    decay factors given transposed, ``decay_wh (W, H, C)`` (``decay.transpose(0, 1)``, contiguous).

    Four large matrix products per image on oneDNN and two row-block transposes, no element-wise permutes:
    the transform along H is one product ``C_H @ u_b`` on the ``(H, W*C)`` view; a copy to ``(W, H, C)``
    (blocks of ``C`` contiguous values) makes the transform along W one product too; the spectrum stays in the
    ``(W, H, C)`` layout for the decay and the first inverse product. Call only where
    :func:`compute_dtype` of ``u`` is not ``None``; the result equals the matrix DCT path to rounding.
    """
    b, h, w, c = u.shape
    dtype = u.dtype
    ch, cw, ch_t, cw_t = _bases(h, w, dtype)
    decay_wh = decay_wh.to(dtype)
    out = torch.empty_like(u, memory_format=torch.contiguous_format)
    tmp = torch.empty(w, h, c, dtype=dtype, device=u.device)
    tmp2 = torch.empty(h, w, c, dtype=dtype, device=u.device)
    for i in range(b):
        y = onednn_mm(ch, u[i].reshape(h, w * c).t())  # (H', W*C): transform along H
        tmp.copy_(y.view(h, w, c).transpose(0, 1))  # (W, H', C)
        s = onednn_mm(cw, tmp.view(w, h * c).t())  # (W', H'*C): transform along W, the spectrum
        s.mul_(decay_wh.view(w, h * c))
        z = onednn_mm(cw_t, s.t())  # (W, H'*C): inverse along W
        tmp2.copy_(z.view(w, h, c).transpose(0, 1))  # (H', W, C)
        y = onednn_mm(ch_t, tmp2.view(h, w * c).t())  # (H, W*C): inverse along H
        out[i] = y.view(h, w, c)
    return out


@functools.lru_cache(maxsize=64)
def _inverse_neighbour_count(h: int, w: int, dtype: torch.dtype) -> torch.Tensor:
    """``1 / neighbour_count`` of an ``h x w`` map as an NHWC ``(1, H, W, 1)`` tensor, made once per size (not an
    inference tensor, so that it serves every mode); 0 where a pixel has no neighbour (a 1x1 map)."""
    with torch.inference_mode(False):
        count = neighbour_count(torch.empty(1, 1, h, w, dtype=dtype)).reshape(1, h, w, 1)
        return torch.where(count > 0, 1.0 / count.clamp(min=1.0), torch.zeros_like(count))


HEAT_CONV_MIN_ELEMENTS = 1 << 17  # from this many elements of a map on, the heat step sums neighbours by convolution


def neighbour_heat_nhwc(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The HcNet authors' heat step ``x + alpha (mean_8(x) - x)`` (:class:`~pdevision.layers.hcl.NeighbourMeanHeat`:
    ``mean_8`` the mean of the neighbours inside the image) on an NHWC map ``x (B, H, W, C)``, ``alpha`` broadcasting
    against ``(B, 1, 1, C)`` (cast to the dtype of ``x``); a new NHWC tensor, contiguous when ``x`` is.

    The mean of the neighbours comes from one pass over the map, then one ``lerp`` into it, which rounds once (in
    bfloat16, where the plain path rounds after each of its steps); the plain path, on NCHW memory, pools the map and
    a map of ones and makes a new tensor in each of six more steps. From :data:`HEAT_CONV_MIN_ELEMENTS` elements on,
    the pass is a depthwise 3x3 convolution of weight 1/8 on the neighbours and 0 on the centre (the mean inside the
    map), its two border rows and columns rescaled in place to their neighbour count (5 on an edge, 3 at a corner):
    from that size it is about twice as fast as the pool (``benchmarks/hcnet_fastpath``, "The heat step"). Below it
    (the oneDNN call and the border's two views cost more than they save on small maps) a 3x3 sum pool (an average
    pool with divisor 1) and two in-place passes over its output, minus the centre and times the neighbour count's
    inverse (made once per map size: :func:`_inverse_neighbour_count`). A map of one pixel, which has no neighbours,
    is returned unchanged (as by the plain path). Equals :func:`~pdevision.ops.fdm.neighbour_mean`'s step to float
    rounding."""
    h, w = x.shape[1], x.shape[2]
    if h * w == 1:
        return x.clone()
    if h > 1 and w > 1 and x.numel() >= HEAT_CONV_MIN_ELEMENTS:
        s = F.conv2d(x.permute(0, 3, 1, 2), _neighbour_weight(x.shape[3], x.dtype), padding=1, groups=x.shape[3])
        s = s.permute(0, 2, 3, 1)
        s[:, :: h - 1].mul_(_border_rescale(w, x.dtype))  # the first and last rows: 8 / 5, at corners 8 / 3
        s[:, 1:-1, :: w - 1].mul_(8 / 5)  # the first and last columns between them
    else:
        s = F.avg_pool2d(x.permute(0, 3, 1, 2), 3, stride=1, padding=1, divisor_override=1).permute(0, 2, 3, 1)
        s.sub_(x).mul_(_inverse_neighbour_count(h, w, x.dtype))  # the mean of the neighbours
    return torch.lerp(x, s, alpha.to(x.dtype), out=s)  # x + alpha (mean - x)


@functools.lru_cache(maxsize=64)
def _neighbour_weight(channels: int, dtype: torch.dtype) -> torch.Tensor:
    """The depthwise ``(C, 1, 3, 3)`` weight of the mean of 8 neighbours: 1/8 around, 0 in the centre."""
    with torch.inference_mode(False):
        weight = torch.full((channels, 1, 3, 3), 1 / 8, dtype=dtype)
        weight[:, :, 1, 1] = 0
        return weight


@functools.lru_cache(maxsize=64)
def _border_rescale(w: int, dtype: torch.dtype) -> torch.Tensor:
    """``(1, 1, W, 1)``: what turns the sum of a border row's neighbours over 8 into their mean, 8 / 5 along the row
    and 8 / 3 at its two corners."""
    with torch.inference_mode(False):
        scale = torch.full((1, 1, w, 1), 8 / 5, dtype=dtype)
        scale[:, :, [0, -1]] = 8 / 3
        return scale
