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

from pdevision.ops.dct import DctMethod, _norm_dims, dct2, idct2


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

    Returns an ``(h, w)`` tensor, cached per size, device and dtype (do not modify in place).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    build = _build_frequency_energy if torch.compiler.is_compiling() else _frequency_energy_cached
    return build(h, w, device, dtype or torch.get_default_dtype())


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
    if torch.compiler.is_compiling():
        return _build_interp_matrix(n_out, n_in)
    return _interp_matrix_cached(n_out, n_in)


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
