"""Wave Propagation Operator of WaveFormer: the spectral operator with a wave transfer in place of the heat decay."""

from __future__ import annotations

import torch
from torch import nn

from pdevision.layers.spectral import SpectralOperator
from pdevision.ops.dct import DctMethod
from pdevision.ops.heat import frequency_energy
from pdevision.ops.wave import wave_transfer

__all__ = ["WavePropagationOperator", "add_frequency_time"]


def add_frequency_time(t: torch.Tensor, tau: float) -> torch.Tensor:
    """``t + tau |w|`` for times ``t`` of shape ``(H, W, C)`` on the ``(H, W)`` DCT grid."""
    radius = frequency_energy(t.shape[0], t.shape[1], t.device, torch.promote_types(t.dtype, torch.float32)).sqrt()
    return t + (tau * radius).to(t.dtype).unsqueeze(-1)


# An FX leaf: the frequency grid depends on concrete sizes.
torch.fx.wrap("add_frequency_time")


class WavePropagationOperator(SpectralOperator):
    """WaveFormer's operator: ``u = IDCT2(DCT2(phi(x)) * (cos(c t) + (1 + alpha/2) sin(c t) / c))`` gated by SiLU.

    :class:`~pdevision.layers.spectral.SpectralOperator` with :func:`~pdevision.ops.wave.wave_transfer` as transfer:
    the propagation time ``t = GELU(Linear(FVE))`` per frequency and channel, the wave speed ``c`` (initial 1) and the
    damping ``alpha`` (initial 0.1) one learnable scalar each, as in the authors' code (``Wave2D`` in
    ``WaveFormer/WaveFormer_dct.py``, github ZishanShu/WaveFormer). Their code feeds the same DCT coefficients as
    initial field and initial velocity; this is the factor that results. How it differs from the exact damped wave
    solution (:func:`~pdevision.ops.wave.wave_propagate`) is stated in :mod:`pdevision.ops.wave`.

    Input and output: NHWC ``(B, H, W, C)``. The Frequency Value Embedding ``fve`` is ``(H, W, C)``. Folding and any
    input size are the spectral operator's.

    ``time_init`` (default 0, the authors' form) adds a fixed time ``tau`` through the frequency,
    ``t = GELU(Linear(FVE)) + tau |w|``, so that the phase ``c t`` starts as the exact solution's ``c |w| tau``: at
    step 0 the operator is then a wave filter that depends on the frequency, not a near pass-through (with the
    authors' initialisation ``t`` starts near 0 and the factor near 1 at every frequency). This is this library's
    option, not the WaveFormer authors'.
    """

    def __init__(
        self,
        dim: int,
        dct_method: DctMethod = "auto",
        c_init: float = 1.0,
        alpha_init: float = 0.1,
        time_init: float = 0.0,
    ) -> None:
        if not (isinstance(time_init, (int, float)) and not isinstance(time_init, bool) and 0 <= time_init < 1e6):
            raise ValueError(f"time_init must be a finite number of at least 0, got {time_init!r}")
        super().__init__(dim, dct_method)
        self._build_input()
        self.to_k = nn.Sequential(nn.Linear(dim, dim), nn.GELU())
        self.c = nn.Parameter(torch.full((1,), float(c_init)))
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.time_init = float(time_init)
        self._build_output()

    def propagation_time(self, fve: torch.Tensor) -> torch.Tensor:
        """``t = GELU(Linear(FVE)) + time_init |w|``, ``(H, W, C)``."""
        t = self.to_k(fve)
        return add_frequency_time(t, self.time_init) if self.time_init else t

    def transfer(self, fve: torch.Tensor) -> torch.Tensor:
        """The wave factors ``cos(c t) + (1 + alpha / 2) sin(c t) / (c + 1e-8)`` ``(H, W, C)`` for the FVE's size."""
        t = self.propagation_time(fve)
        return wave_transfer(t, self.c.to(t.dtype), self.alpha.to(t.dtype))
