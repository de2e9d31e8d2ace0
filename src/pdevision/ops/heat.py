"""Exact solutions of the heat equation with insulated (Neumann) boundaries, by the 2-D DCT.

On the cell-centred grid ``x = 0.5, 1.5, ..., N - 0.5`` of the domain ``[0, N]`` with
``du/dn = 0`` on the boundary, the cosines ``cos(w_n x)`` with ``w_n = n pi / N`` are the
eigenfunctions of the Laplacian, so ``u_t = k (u_xx + u_yy)`` is solved exactly by

    u(t) = IDCT2( DCT2(u0) * exp(-k t (w_n^2 + w_m^2)) )        (vHeat, Eq. 6-8)

``k`` may vary per frequency and per channel (the vHeat diffusivity predicted from the
Frequency Value Embeddings); with a constant ``k`` this is the heat-equation solution.
"""

from __future__ import annotations

import functools
import math

import torch

from pdevision.ops.dct import DctMethod, _norm_dims, dct2, graph_capture, idct2


@torch.inference_mode(False)  # cached: usable by autograd even if built in inference mode
def _build_frequency_energy(h: int, w: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    wy = torch.arange(h, dtype=torch.float64) * (math.pi / h)
    wx = torch.arange(w, dtype=torch.float64) * (math.pi / w)
    return (wy[:, None] ** 2 + wx[None, :] ** 2).to(device=device, dtype=dtype)


_frequency_energy_cached = functools.lru_cache(maxsize=64)(_build_frequency_energy)


def frequency_energy(
    h: int, w: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``w_n^2 + w_m^2`` on the ``(h, w)`` DCT frequency grid, ``w_n = n pi / h``, ``w_m = m pi / w``.

    Returns an ``(h, w)`` tensor, cached per size, device and dtype (do not modify in place). In a recorded graph
    (:func:`~pdevision.ops.dct.graph_capture`) it is built with tensor operations from ``h`` and ``w``, which may be
    symbolic or traced sizes there.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    dtype = dtype or torch.get_default_dtype()
    if graph_capture():
        wy, wx = _frequencies(h, device, dtype), _frequencies(w, device, dtype)
        return wy[:, None] ** 2 + wx[None, :] ** 2
    return _frequency_energy_cached(h, w, device, dtype)


def _grid(n: int | torch.SymInt | torch.Tensor, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``(arange(n), n)`` as tensors of ``dtype`` (float64 for float64, else float32), for a size that may be
    symbolic or traced: no Python arithmetic on it."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    idx = torch.arange(n, device=device, dtype=work)
    return idx, idx[-1:] + 1.0


def _frequencies(n: int | torch.SymInt | torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The DCT angular frequencies ``w_j = j pi / n``, ``j = 0 .. n-1``, built with tensor operations."""
    idx, nf = _grid(n, device, dtype)
    return (idx * math.pi / nf).to(dtype)


def heat_conduct(
    u0: torch.Tensor,
    k: torch.Tensor | float,
    t: torch.Tensor | float = 1.0,
    dims: tuple[int, int] = (-2, -1),
    method: DctMethod = "auto",
) -> torch.Tensor:
    """Solve ``u_t = k (u_xx + u_yy)`` with insulated boundaries for time ``t``, exactly.

    Args:
        u0: initial temperature; the two spatial dimensions are ``dims`` (NCHW: ``(-2, -1)``,
            NHWC: ``(1, 2)``), every other dimension is a batch of independent fields.
        k: diffusivity, a non-negative scalar or a tensor that broadcasts against the DCT
            coefficients of ``u0`` (per frequency and per channel, for example ``(C, H, W)`` for
            NCHW input or ``(H, W, C)`` for NHWC input).
        t: time, a scalar or a tensor that broadcasts like ``k``.
        method: DCT implementation, see :mod:`pdevision.ops.dct`.

    Returns:
        ``u(t)``, same shape and layout as ``u0``.
    """
    d0, d1 = _norm_dims(u0, dims)
    for name, value in (("k", k), ("t", t)):
        if isinstance(value, torch.Tensor):
            value = value.detach()
            bad = value.is_complex() or not bool(torch.isfinite(value).all() and (value >= 0).all())
        else:
            bad = isinstance(value, complex) or not (math.isfinite(value) and value >= 0)
        if bad:
            raise ValueError(f"heat_conduct needs a finite, non-negative {name}, got {value}")
    h, w = u0.shape[d0], u0.shape[d1]
    energy = frequency_energy(h, w, u0.device, torch.promote_types(u0.dtype, torch.float32))
    view = [1] * u0.ndim
    view[d0], view[d1] = h, w
    if d0 > d1:
        energy = energy.t()
    decay = torch.exp(-(k * t) * energy.reshape(view))
    if torch.broadcast_shapes(decay.shape, u0.shape) != u0.shape:
        raise ValueError(
            f"k and t must broadcast against the DCT coefficients of u0 {tuple(u0.shape)} without adding to their "
            f"shape; the decay factors have shape {tuple(decay.shape)}"
        )
    return idct2(dct2(u0, dims, method) * decay, dims, method).to(u0.dtype)


@torch.inference_mode(False)  # cached: usable by autograd even if built in inference mode
def _build_interp_matrix(n_out: int, n_in: int) -> torch.Tensor:
    """``(n_out, n_in)`` matrix that linearly interpolates a function sampled at ``w = i pi / n_in``
    onto ``w = j pi / n_out``; frequencies above the largest trained one take its value."""
    pos = torch.arange(n_out, dtype=torch.float64) * (n_in / n_out)
    pos = pos.clamp(max=n_in - 1)
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=n_in - 1)
    frac = pos - lo
    mat = torch.zeros(n_out, n_in, dtype=torch.float64)
    rows = torch.arange(n_out)
    mat.index_put_((rows, lo), 1.0 - frac, accumulate=True)
    mat.index_put_((rows, hi), frac, accumulate=True)
    return mat


_interp_matrix_cached = functools.lru_cache(maxsize=64)(_build_interp_matrix)


def _frequency_interp_matrix(n_out: int, n_in: int) -> torch.Tensor:
    return _interp_matrix_cached(n_out, n_in)


def _cubic_weights(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Keys' cubic convolution weights (a = -0.75, as ``F.interpolate(mode="bicubic")``) of the four taps at offsets
    -1, 0, 1, 2 from ``floor(x)``, for the fractional part ``t`` of the source position ``x``."""
    a = -0.75

    def near(d: torch.Tensor) -> torch.Tensor:  # |d| <= 1
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0

    def far(d: torch.Tensor) -> torch.Tensor:  # 1 < |d| < 2
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    return far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)


def _resample_matrix(
    n_out: int | torch.SymInt | torch.Tensor, n_in: int, mode: str, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``(n_out, n_in)`` matrix of :func:`resize_spectrum`'s rule ``mode`` along one axis, built with tensor
    operations from a size ``n_out`` that may be symbolic or traced (one-hot columns, no indexing by size)."""
    j, nout = _grid(n_out, device, dtype)
    i, nin = _grid(n_in, device, dtype)
    cols = i[None, :]

    def onehot(index: torch.Tensor) -> torch.Tensor:
        return (cols == index[:, None]).to(j.dtype)

    if mode == "pad":  # keep the entries at their indices: crop, and zeros beyond the stored ones
        mat = onehot(j)
    elif mode == "interp":  # linear in the physical frequency j pi / n_out, held at the largest stored one
        pos = torch.minimum(j * nin / nout, nin - 1.0)
        lo = torch.floor(pos)
        hi = torch.minimum(lo + 1.0, nin - 1.0)
        frac = (pos - lo)[:, None]
        mat = (1.0 - frac) * onehot(lo) + frac * onehot(hi)
    else:  # "downstream": bicubic, pixel grid to pixel grid (align_corners=False), edges clamped
        src = (j + 0.5) * (nin / nout) - 0.5
        base = torch.floor(src)
        taps = _cubic_weights(src - base)
        mat = sum(
            w[:, None] * onehot(torch.clamp(base + (t - 1.0), min=0.0).minimum(nin - 1.0)) for t, w in enumerate(taps)
        )
    return mat.to(dtype)


def resize_spectrum(spec: torch.Tensor, size: tuple[int, int], mode: str = "interp") -> torch.Tensor:
    """Resample a per-frequency map ``(H, W, C)`` (channels last) to ``size = (h, w)`` frequencies.

    ``mode="interp"`` (default) keeps the physical frequency: the value for ``w_j = j pi / h`` is
    linearly interpolated between the trained frequencies ``i pi / H``; frequencies above the
    largest trained one take the value of the largest. At ``size == (H, W)`` the map is unchanged.
    ``mode="pad"`` is the vHeat authors' rule for larger inputs: keep the trained entries at their
    indices and zero-pad the new high frequencies (crop when smaller).
    ``mode="downstream"`` is the run-time half of the vHeat authors' downstream rule (their
    ``segmentation/model.py`` and ``detection/model.py``): the map is resampled as an image with
    ``F.interpolate(mode="bicubic", align_corners=False)``, pixel grid to pixel grid (the load-time
    half, zero padding to the downstream training size, is ``mode="pad"``).
    """
    h_in, w_in = spec.shape[0], spec.shape[1]
    h, w = size
    if graph_capture():  # one graph for every size: resampling matrices built from the sizes, no branch on them
        if mode not in ("interp", "pad", "downstream"):
            raise ValueError(f"spectrum resize mode must be 'interp' or 'pad' or 'downstream', got {mode!r}")
        mh = _resample_matrix(h, h_in, mode, spec.device, spec.dtype)
        mw = _resample_matrix(w, w_in, mode, spec.device, spec.dtype)
        out = torch.matmul(mh, spec.transpose(0, 1)).transpose(0, 1)  # (h, W, C): along the first axis
        return torch.matmul(mw, out)  # (h, w, C)
    for name, n in (("height", h), ("width", w), ("stored height", h_in), ("stored width", w_in)):
        if not n >= 1:  # (not isinstance: sizes are symbolic under torch.compile)
            raise ValueError(f"resize_spectrum: the {name} must be a positive integer, got {n!r} (size {size!r})")
    if (h, w) == (h_in, w_in):
        return spec
    if mode == "pad":
        out = spec[:h, :w]
        return torch.nn.functional.pad(out, (0, 0, 0, max(w - w_in, 0), 0, max(h - h_in, 0)))
    if mode == "downstream":
        img = spec.permute(2, 0, 1).unsqueeze(0)
        out = torch.nn.functional.interpolate(img, size=(h, w), mode="bicubic", align_corners=False)
        return out[0].permute(1, 2, 0)
    if mode != "interp":
        raise ValueError(f"spectrum resize mode must be 'interp' or 'pad' or 'downstream', got {mode!r}")
    mh = _frequency_interp_matrix(h, h_in).to(device=spec.device, dtype=spec.dtype)
    mw = _frequency_interp_matrix(w, w_in).to(device=spec.device, dtype=spec.dtype)
    # two plain matrix products (an einsum over both axes at once takes a slow path)
    out = (mh @ spec.reshape(h_in, w_in * spec.shape[2])).reshape(h, w_in, spec.shape[2])
    return torch.matmul(mw, out)
