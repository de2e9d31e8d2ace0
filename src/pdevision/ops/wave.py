"""The damped wave equation with insulated (Neumann) boundaries in the DCT basis, and WaveFormer's transfer.

On the cell-centred grid of ``[0, N]`` the cosines ``cos(w_n x)``, ``w_n = n pi / N``, are the Laplacian's
eigenfunctions (see :mod:`pdevision.ops.heat`), so ``u_tt + alpha u_t = c^2 (u_xx + u_yy)`` decouples into one
damped oscillator per frequency, ``a'' + alpha a' + c^2 |w|^2 a = 0``, solved in closed form by
:func:`wave_propagate`.

:func:`wave_transfer` is the per-frequency factor that WaveFormer's operator trains (the authors' code,
``Wave2D.forward`` in ``WaveFormer/WaveFormer_dct.py``): ``cos(c t) + (1 + alpha / 2) sin(c t) / c`` with a
"time" ``t`` learned per frequency and channel. It is the undamped mode solution with initial velocity equal to the
initial field, with three differences from :func:`wave_propagate` (the code's, kept for parity): the phase ``c t``
replaces ``c |w| t`` (the frequency enters only through the learned ``t``), the sine term is divided by ``c``, not by
``c |w|``, and ``alpha`` enters only through the ``alpha / 2`` velocity term, with no ``exp(-alpha t / 2)`` decay.
"""

from __future__ import annotations

import torch

from pdevision._values import is_finite_number
from pdevision.ops.dct import DctMethod, _norm_dims, dct2, idct2
from pdevision.ops.heat import frequency_energy

# The authors' guard against c = 0 in the sine term.
WAVE_EPS = 1e-8


def wave_transfer(t: torch.Tensor, c: torch.Tensor, alpha: torch.Tensor, eps: float = WAVE_EPS) -> torch.Tensor:
    """WaveFormer's transfer factor ``cos(c t) + (1 + alpha / 2) sin(c t) / (c + eps)``, element-wise.

    ``t`` is the learned propagation time per frequency and channel (any shape, e.g. ``(H, W, C)``), ``c`` the wave
    speed and ``alpha`` the damping (scalars or tensors that broadcast against ``t``). The factor multiplies the DCT
    coefficients of the field, as the heat decay does in vHeat.
    """
    phase = c * t
    return torch.cos(phase) + (1.0 + alpha / 2.0) * torch.sin(phase) / (c + eps)


def _mode_factors(lam: torch.Tensor, t: float, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Q)`` with ``a(t) = P a(0) + Q a'(0)`` for ``a'' + alpha a' + lam a = 0``, every ``lam >= 0``:
    underdamped, critically damped and overdamped modes alike (complex square root, real result)."""
    disc = (lam - alpha * alpha / 4.0).to(torch.complex128)
    omega = torch.sqrt(disc)  # imaginary for overdamped modes: cos -> cosh, sin / omega -> sinh / kappa
    small = omega.abs() < 1e-12
    safe = torch.where(small, torch.ones_like(omega), omega)
    sinc = torch.where(small, torch.full_like(omega, t), torch.sin(safe * t) / safe)  # sin(omega t) / omega
    damp = torch.exp(torch.tensor(-alpha * t / 2.0, dtype=torch.float64))
    p = damp * (torch.cos(omega * t) + (alpha / 2.0) * sinc)
    q = damp * sinc
    return p.real, q.real


def wave_propagate(
    u0: torch.Tensor,
    t: float,
    c: float = 1.0,
    alpha: float = 0.0,
    v0: torch.Tensor | None = None,
    dims: tuple[int, int] = (-2, -1),
    method: DctMethod = "auto",
) -> torch.Tensor:
    """Solve ``u_tt + alpha u_t = c^2 (u_xx + u_yy)`` with insulated boundaries for time ``t``, exactly.

    Args:
        u0: initial field; the two spatial dimensions are ``dims`` (NCHW: ``(-2, -1)``, NHWC: ``(1, 2)``), every
            other dimension is a batch of independent fields.
        t: time, ``>= 0``.
        c: wave speed, ``>= 0``.
        alpha: damping, ``>= 0``.
        v0: initial velocity ``u_t(0)``, the shape of ``u0`` (default zero).
        method: DCT implementation, see :mod:`pdevision.ops.dct`.

    Returns:
        ``u(t)``, same shape, layout and dtype as ``u0``. Each DCT mode ``a`` evolves as the damped oscillator
        ``a(t) = e^{-alpha t / 2} (a0 cos(W t) + (v0 + alpha a0 / 2) sin(W t) / W)``, ``W^2 = c^2 |w|^2 - alpha^2 / 4``
        (``cosh`` / ``sinh`` where ``W^2 < 0``).
    """
    for name, value in (("t", t), ("c", c), ("alpha", alpha)):
        if not (is_finite_number(value) and value >= 0):
            raise ValueError(f"wave_propagate needs a finite, non-negative number {name}, got {value!r}")
    if v0 is not None and not isinstance(v0, torch.Tensor):
        raise ValueError(f"v0 must be a torch.Tensor of the shape of u0 {tuple(u0.shape)}, got {type(v0).__name__}")
    if v0 is not None and v0.shape != u0.shape:
        raise ValueError(f"v0 must have the shape of u0 {tuple(u0.shape)}, got {tuple(v0.shape)}")
    d0, d1 = _norm_dims(u0, dims)
    h, w = u0.shape[d0], u0.shape[d1]
    lam = (c * c) * frequency_energy(h, w, u0.device, torch.float64)
    p, q = _mode_factors(lam, float(t), float(alpha))
    view = [1] * u0.ndim
    view[d0], view[d1] = h, w
    if d0 > d1:
        p, q = p.t(), q.t()
    work = torch.promote_types(u0.dtype, torch.float32)
    p, q = p.reshape(view).to(work), q.reshape(view).to(work)
    spec = dct2(u0.to(work), dims, method) * p
    if v0 is not None:
        spec = spec + dct2(v0.to(work), dims, method) * q
    return idct2(spec, dims, method).to(u0.dtype)
