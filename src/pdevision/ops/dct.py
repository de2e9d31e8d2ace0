"""Orthonormal 2-D DCT-II and its inverse (DCT-III) over two spatial dimensions.

Two implementations with identical results:

* ``"matrix"``: two matrix products with a cached cosine basis. Cost per transform is
  ``O(H*W*(H+W))``, i.e. ``O(N^1.5)`` in the number of tokens ``N = H*W`` for square maps.
* ``"fft"``: Makhoul's reordering plus one complex FFT per dimension, ``O(N log N)``.

Both equal ``scipy.fft.dctn(x, type=2, norm="ortho", axes=dims)`` (and ``idctn`` for the inverse).
The functions are layout-agnostic: ``dims`` names the two spatial dimensions, ``(-2, -1)`` for NCHW
tensors and ``(1, 2)`` for NHWC tensors.

While a graph is recorded (:func:`graph_capture`: ``torch.compile``, ``torch.export`` and the ONNX exporters), the
matrix transform builds its cosine basis from the input's shape with tensor operations (:func:`dct_basis`), with no
cache and no Python branch on a size, so that one graph serves every height and width.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from typing import Literal

import torch

DctMethod = Literal["matrix", "fft", "auto"]

# Token count (H*W) from which ``method="auto"`` uses the FFT transform. On the 2-core development CPU
# the matrix path was faster at every size measured with 2 threads, up to 512x512 (benchmarks/dct_crossover,
# and the heat-operator rows of benchmarks/archive/bench_cpu/results.md), so auto uses the FFT only beyond that;
# override with ``set_auto_threshold`` for other machines.
_AUTO_FFT_MIN_TOKENS = 512 * 512 + 1


def set_auto_threshold(tokens: int) -> None:
    """Set the token count ``H*W`` from which ``method="auto"`` switches to the FFT transform."""
    global _AUTO_FFT_MIN_TOKENS
    if tokens < 1:
        raise ValueError(f"auto threshold must be a positive token count, got {tokens}")
    _AUTO_FFT_MIN_TOKENS = int(tokens)


_FORCED_METHOD: Literal["matrix", "fft"] | None = None
_FFT_FLOPS: list[float] | None = None  # while tallying: real FLOPs of FFT transforms, by formula


@contextlib.contextmanager
def tally_fft_flops() -> Iterator[list[float]]:
    """Within the block, FFT-path transforms add their floating-point work to the yielded one-item list.

    ``torch.utils.flop_counter`` does not count FFTs; this estimates each 1-D transform of length
    ``n`` over ``m`` signals as ``m * (2.5 n log2 n + 8 n)``: a real FFT plus the twiddle, reordering
    and scaling passes.
    """
    global _FFT_FLOPS
    previous, _FFT_FLOPS = _FFT_FLOPS, [0.0]
    try:
        yield _FFT_FLOPS
    finally:
        _FFT_FLOPS = previous


def _tally(x: torch.Tensor, dim: int) -> None:
    if _FFT_FLOPS is not None:
        n = x.shape[dim]
        _FFT_FLOPS[0] += x.numel() / n * (2.5 * n * math.log2(max(n, 2)) + 8 * n)


@contextlib.contextmanager
def force_method(method: Literal["matrix", "fft"]) -> Iterator[None]:
    """Within the block, ``method="auto"`` resolves to ``method`` (e.g. to count FLOPs of one path)."""
    global _FORCED_METHOD
    if method not in ("matrix", "fft"):
        raise ValueError(f"forced DCT method must be 'matrix' or 'fft', got {method!r}")
    previous, _FORCED_METHOD = _FORCED_METHOD, method
    try:
        yield
    finally:
        _FORCED_METHOD = previous


def _check_method(method: DctMethod) -> DctMethod:
    if method not in ("matrix", "fft", "auto"):
        raise ValueError(f"DCT method must be 'matrix', 'fft' or 'auto', got {method!r}")
    return method


def resolve_method(method: DctMethod, h: int, w: int) -> Literal["matrix", "fft"]:
    """Return the concrete implementation that ``method`` selects for an ``h x w`` map."""
    if _check_method(method) == "auto" and _FORCED_METHOD is not None:
        return _FORCED_METHOD
    if method == "auto":
        return "fft" if h * w >= _AUTO_FFT_MIN_TOKENS else "matrix"
    return method  # type: ignore[return-value]


def graph_capture() -> bool:
    """Whether a graph is being recorded in which sizes may be symbolic (``torch.compile`` and ``torch.export``,
    SymInts) or traced (``torch.jit.trace``, the legacy ONNX exporter: sizes are 0-d tensors)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def dct_basis(n: int | torch.SymInt | torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The orthonormal DCT-II matrix of :func:`dct_matrix`, built with tensor operations only from a size ``n`` that
    may be symbolic or traced, so that a recorded graph builds it for the size it runs at.

    The angle index ``k (2x + 1)`` is reduced modulo ``4n`` in exact float32 integer arithmetic (``n`` up to 2048)
    before the cosine, which keeps every entry within a few float32 ulps of the float64 basis.
    """
    work = torch.float64 if dtype == torch.float64 else torch.float32
    idx = torch.arange(n, device=device, dtype=work)
    nf = idx[-1:] + 1.0  # n as a tensor: no Python arithmetic on a symbolic or traced size
    angle = torch.remainder(idx[:, None] * (2.0 * idx[None, :] + 1.0), 4.0 * nf)
    basis = torch.cos(angle * (math.pi / 2.0) / nf)
    scale = torch.where(idx == 0, torch.rsqrt(nf), torch.rsqrt(nf / 2.0))
    return (basis * scale[:, None]).to(dtype)


def _apply_basis_graph(x: torch.Tensor, dim: int, inverse: bool) -> torch.Tensor:
    """:func:`_apply_basis` for a recorded graph: the basis from :func:`dct_basis`, no reshape to a computed size."""
    mat = dct_basis(x.shape[dim], x.device, x.dtype)
    if dim == x.ndim - 1:
        return torch.matmul(x, mat if inverse else mat.t())
    if dim == x.ndim - 2:
        return torch.matmul(mat.t() if inverse else mat, x)
    last2 = x.ndim - 2  # swap `dim` there and back (non-negative dims: the legacy ONNX exporter needs them)
    return torch.matmul(mat.t() if inverse else mat, x.transpose(dim, last2)).transpose(dim, last2)


@torch.inference_mode(False)  # cached: must stay usable by autograd even if first built in inference mode
def _build_dct_matrix(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    x = torch.arange(n, dtype=torch.float64).unsqueeze(0)
    basis = torch.cos(math.pi * k * (x + 0.5) / n) * math.sqrt(2.0 / n)
    basis[0] /= math.sqrt(2.0)
    return basis.to(device=device, dtype=dtype)


_dct_matrix_cached = functools.lru_cache(maxsize=64)(_build_dct_matrix)


def dct_matrix(n: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Orthonormal DCT-II matrix ``C`` of size ``(n, n)``: ``X = C @ x``, and ``x = C.T @ X``.

    ``C[k, x] = s_k cos(pi k (x + 1/2) / n)`` with ``s_0 = sqrt(1/n)``, ``s_k = sqrt(2/n)``.
    Cached per ``(n, device, dtype)``; the returned tensor must not be modified in place.
    """
    if n < 1:
        raise ValueError(f"DCT size must be positive, got {n}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    dtype = dtype or torch.get_default_dtype()
    if torch.compiler.is_compiling():  # traced once into a constant; the Python cache is not traceable
        return _build_dct_matrix(n, device, dtype)
    return _dct_matrix_cached(n, device, dtype)


def _norm_dims(x: torch.Tensor, dims: tuple[int, int]) -> tuple[int, int]:
    """``dims`` as two non-negative dimension indices of ``x``; a clear error for what the transforms cannot take (an
    integer tensor would otherwise be multiplied with an integer basis, every coefficient truncated to 0)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"the DCT takes a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"the DCT needs a real floating-point tensor, got {x.dtype} (convert it with .float())")
    if len(dims) != 2:
        raise ValueError(f"dims must name two spatial dimensions, got {dims}")
    if any(not -x.ndim <= d < x.ndim for d in dims):
        raise ValueError(f"dims {tuple(dims)} out of range for a {x.ndim}-D tensor")
    d0, d1 = (d % x.ndim for d in dims)
    if d0 == d1:
        raise ValueError(f"dims must be two different dimensions, got {dims}")
    if torch.jit.is_tracing():  # traced sizes are tensors: a Python test on them would be frozen into the graph
        return d0, d1
    if x.shape[d0] == 0 or x.shape[d1] == 0:
        raise ValueError(f"the spatial dimensions must not be empty, got {x.shape[d0]}x{x.shape[d1]}")
    return d0, d1


# Under bfloat16 / float16, CPU ``bmm`` copies a stride-0 (expanded) batch of matrices to contiguous memory on every
# call: a fresh allocation of ``batch * n * n`` values, which page-faults on large maps (0.66 ms of 1.5 ms per product
# on the 128x128x96 maps of vHeat-T at 512 px, profiled in a full forward). The basis batch is built once instead,
# on the CPU only (where the copy was measured) and up to a size (16M values, 32 MiB in bfloat16), so that a large
# training batch does not keep a large cache alive.
_LOW_PRECISION = (torch.bfloat16, torch.float16)
_BASIS_BATCH_MAX_VALUES = 2**24


@torch.inference_mode(False)  # cached: usable by autograd even if built in inference mode
def _build_basis_batch(n: int, inverse: bool, batch: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    mat = dct_matrix(n, device, dtype)
    return (mat.t() if inverse else mat).expand(batch, n, n).contiguous()


_basis_batch_cached = functools.lru_cache(maxsize=16)(_build_basis_batch)


def _apply_basis(x: torch.Tensor, dim: int, inverse: bool) -> torch.Tensor:
    """Multiply the DCT basis (its transpose when ``inverse``) along dimension ``dim`` of ``x``, without a transposed
    copy of ``x``."""
    n = x.shape[dim]
    mat = dct_matrix(n, x.device, x.dtype)
    mat = mat.t() if inverse else mat
    if dim == x.ndim - 1:
        return x @ mat.t()
    # Contract over `dim`: reshape to (prefix, n, suffix) so a batched matmul does the work.
    shape = x.shape
    prefix = math.prod(shape[:dim])
    suffix = math.prod(shape[dim + 1 :])
    cached = x.dtype in _LOW_PRECISION and x.device.type == "cpu" and prefix * n * n <= _BASIS_BATCH_MAX_VALUES
    if prefix > 1 and cached and not torch.compiler.is_compiling():
        batch = _basis_batch_cached(n, inverse, prefix, x.device, x.dtype)
    else:
        # bmm of the expanded (stride-0) matrix: the same products as matmul, without the contiguous copy of the
        # expanded matrix that matmul makes (1.0-1.1x in fp32, interleaved)
        batch = mat.expand(prefix, n, n)
    y = torch.bmm(batch, x.reshape(prefix, n, suffix))
    return y.reshape(*shape[:dim], n, *shape[dim + 1 :])


def _twiddle(n: int, sign: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    k = torch.arange(n // 2 + 1, device=device, dtype=dtype)
    return torch.polar(torch.ones_like(k), sign * math.pi * k / (2 * n))


def _ortho_scale(n: int, device: torch.device, dtype: torch.dtype, inverse: bool) -> torch.Tensor:
    scale = torch.full((n,), math.sqrt(n / 2.0) if inverse else math.sqrt(2.0 / n), device=device, dtype=dtype)
    scale[0] = math.sqrt(float(n)) if inverse else math.sqrt(1.0 / n)
    return scale


def _dct1_fft(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Orthonormal DCT-II along ``dim`` via one real FFT of the even/odd reordered signal (Makhoul 1980).

    With ``v = [x0, x2, ..., x3, x1]`` and ``Y_k = exp(-i pi k / 2n) rfft(v)_k``, the unnormalised
    coefficients are ``X_k = Re Y_k`` and ``X_{n-k} = -Im Y_k``.
    """
    n = x.shape[dim]
    _tally(x, dim)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    work = work.movedim(dim, -1)
    v = torch.cat([work[..., 0::2], work[..., 1::2].flip(-1)], dim=-1)
    y = torch.fft.rfft(v, dim=-1) * _twiddle(n, -1.0, x.device, work.dtype)
    out = torch.cat([y.real, -y.imag[..., 1 : (n + 1) // 2].flip(-1)], dim=-1)
    out = out * _ortho_scale(n, x.device, work.dtype, inverse=False)
    return out.to(x.dtype).movedim(-1, dim)


def _idct1_fft(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Inverse of :func:`_dct1_fft` (orthonormal DCT-III) along ``dim`` via one inverse real FFT.

    Rebuilds ``Y_k = X_k - i X_{n-k}`` (``X_n = 0``) for ``k <= n/2``, undoes the twiddle, inverts the
    real FFT and the even/odd reordering.
    """
    n = x.shape[dim]
    _tally(x, dim)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    c = work.movedim(dim, -1) * _ortho_scale(n, x.device, work.dtype, inverse=True)
    half = n // 2 + 1
    # X_{n-k} for k = 0..n//2, with X_n = 0
    rev = torch.cat([torch.zeros_like(c[..., :1]), c[..., n - half + 1 :].flip(-1)], dim=-1)
    y = torch.complex(c[..., :half], -rev) * _twiddle(n, 1.0, x.device, work.dtype)
    v = torch.fft.irfft(y, n=n, dim=-1)
    out = torch.empty_like(v)
    mid = (n + 1) // 2
    out[..., 0::2] = v[..., :mid]
    out[..., 1::2] = v[..., mid:].flip(-1)
    return out.to(x.dtype).movedim(-1, dim)


def dct2(x: torch.Tensor, dims: tuple[int, int] = (-2, -1), method: DctMethod = "auto") -> torch.Tensor:
    """Orthonormal 2-D DCT-II of ``x`` over ``dims`` (NCHW: ``(-2, -1)``, NHWC: ``(1, 2)``).

    In a recorded graph (:func:`graph_capture`) ``method="auto"`` is the matrix transform with bases built from the
    input's shape; ``"fft"`` stays the FFT."""
    d0, d1 = _norm_dims(x, dims)
    if graph_capture() and _check_method(method) != "fft":
        return _apply_basis_graph(_apply_basis_graph(x, d0, inverse=False), d1, inverse=False)
    impl = resolve_method(method, x.shape[d0], x.shape[d1])
    if x.numel() == 0:  # an empty batch: nothing to transform (the FFT path has no plan for it)
        return x.clone()
    if impl == "matrix":
        return _apply_basis(_apply_basis(x, d0, inverse=False), d1, inverse=False)
    return _dct1_fft(_dct1_fft(x, d0), d1)


def idct2(x: torch.Tensor, dims: tuple[int, int] = (-2, -1), method: DctMethod = "auto") -> torch.Tensor:
    """Inverse of :func:`dct2` (orthonormal 2-D DCT-III) over ``dims``."""
    d0, d1 = _norm_dims(x, dims)
    if graph_capture() and _check_method(method) != "fft":
        return _apply_basis_graph(_apply_basis_graph(x, d0, inverse=True), d1, inverse=True)
    impl = resolve_method(method, x.shape[d0], x.shape[d1])
    if x.numel() == 0:
        return x.clone()
    if impl == "matrix":
        return _apply_basis(_apply_basis(x, d0, inverse=True), d1, inverse=True)
    return _idct1_fft(_idct1_fft(x, d0), d1)
