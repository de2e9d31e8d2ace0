"""Heat Conduction Operator (HCO) of vHeat: the spectral operator with the heat equation's decay as transfer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from pdevision.layers.spectral import SpectralOperator
from pdevision.ops.dct import DctMethod
from pdevision.ops.heat import frequency_energy

__all__ = ["K_MODES", "HeatConductionOperator", "heat_decay"]


def heat_decay(k: torch.Tensor) -> torch.Tensor:
    """``exp(-k (wx^2 + wy^2))`` for a diffusivity ``k`` of shape ``(H, W, C)`` on the ``(H, W)`` DCT grid (the
    exponent in at least float32)."""
    dtype = torch.promote_types(k.dtype, torch.float32)
    energy = frequency_energy(k.shape[0], k.shape[1], k.device, dtype)
    return torch.exp(-energy.unsqueeze(-1) * k.to(dtype))


# An FX leaf: the frequency grid depends on concrete sizes.
torch.fx.wrap("heat_decay")


K_MODES = ("fve", "learnable", "fixed")


class HeatConductionOperator(SpectralOperator):
    """vHeat HCO: ``u = IDCT2(DCT2(phi(x)) * exp(-k(w) (wx^2 + wy^2)))`` gated by SiLU (vHeat Eq. 8-10).

    :class:`~pdevision.layers.spectral.SpectralOperator` with the heat decay as transfer: one branch is conducted
    with diffusivity ``k = ReLU(Linear(FVE))`` per frequency and channel.

    Input and output: NHWC ``(B, H, W, C)``. The Frequency Value Embedding ``fve`` is ``(H, W, C)``.

    ``k_mode`` selects where the diffusivity comes from (the ablation of issue 14; the vHeat texts at hand do not
    describe one, so these are this library's controls): ``"fve"`` (the paper: ``k = ReLU(Linear(FVE))`` per
    frequency and channel), ``"learnable"`` (one learnable scalar ``k = softplus(a)`` for the whole layer, starting at
    ``k_init``) or ``"fixed"`` (the constant ``k_init``; ``k_init=0`` makes the filter a pass-through, the DCT and
    its inverse cancelling). The last two have no ``to_k`` projection.

    ``k_init`` in the ``"fve"`` mode is an offset inside the ReLU, ``k = ReLU(Linear(FVE) + k_init)``, so that the
    diffusivity at step 0 is about ``k_init`` whatever initialisation the model gives ``to_k`` (default 0: the
    authors' form; with their initialisation, projections of std 0.02 and zero bias, ``k`` starts near 0 and the
    filter near a pass-through). This offset is this library's option, not the vHeat authors'.

    After :meth:`fold` the decay factors ``exp(-k w^2)`` for one resolution are precomputed, so no FVE projection
    runs per forward.
    """

    def __init__(
        self, dim: int, dct_method: DctMethod = "auto", k_mode: str = "fve", k_init: float | None = None
    ) -> None:
        if k_mode not in K_MODES:
            raise ValueError(f"k_mode must be one of {K_MODES}, got {k_mode!r}")
        k_init = (0.0 if k_mode == "fve" else 1.0) if k_init is None else k_init
        if not (isinstance(k_init, (int, float)) and not isinstance(k_init, bool) and math.isfinite(k_init)):
            raise ValueError(f"k_init must be a finite number, got {k_init!r}")
        if k_init < 0 or (k_mode == "learnable" and k_init == 0):
            least = "positive" if k_mode == "learnable" else "at least 0"
            raise ValueError(f"k_init of the {k_mode!r} mode must be {least}, got {k_init}")
        super().__init__(dim, dct_method)
        self.k_mode = k_mode
        self._build_input()
        self.to_k = nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) if k_mode == "fve" else None
        if k_mode == "learnable":  # softplus(a) = k_init
            self.k_param = nn.Parameter(torch.tensor(math.log(math.expm1(k_init))))
        self.k_init = float(k_init)
        self._build_output()

    def diffusivity(self, fve: torch.Tensor) -> torch.Tensor:
        """Thermal diffusivity, non-negative: ``k = ReLU(Linear(FVE))`` ``(H, W, C)`` with ``k_mode="fve"``, else the
        layer's one learnable or fixed ``k`` broadcast to that shape."""
        if self.to_k is not None:
            linear, relu = self.to_k
            return relu(linear(fve) + self.k_init) if self.k_init else self.to_k(fve)
        k = F.softplus(self.k_param) if self.k_mode == "learnable" else fve.new_tensor(self.k_init)
        return k.to(fve.dtype).expand(fve.shape)

    def transfer(self, fve: torch.Tensor) -> torch.Tensor:
        """The decay factors ``exp(-k (wx^2 + wy^2))`` ``(H, W, C)`` for the FVE's size."""
        return heat_decay(self.diffusivity(fve))

    def decay(self, h: int, w: int, fve: torch.Tensor | None) -> torch.Tensor:
        """Decay factors ``exp(-k (wx^2 + wy^2))`` of shape ``(h, w, C)``: from ``fve`` when given, else the folded
        factors (:meth:`~pdevision.layers.spectral.SpectralOperator.factors`)."""
        return self.factors(h, w, fve)
