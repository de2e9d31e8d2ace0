"""Pure tensor functions: DCT transforms, heat and wave kernels, FDM stencils, ball activations."""

from pdevision.ops.ball import hardball, hardtanh, softball
from pdevision.ops.dct import dct2, dct_matrix, force_method, idct2, resolve_method, set_auto_threshold
from pdevision.ops.fdm import fdm_heat_step, heat_stencil, replicate_pad1, stable_coefficients
from pdevision.ops.heat import frequency_energy, heat_conduct, resize_spectrum
from pdevision.ops.wave import wave_propagate, wave_transfer

__all__ = [
    "dct2",
    "dct_matrix",
    "fdm_heat_step",
    "force_method",
    "frequency_energy",
    "hardball",
    "hardtanh",
    "heat_conduct",
    "heat_stencil",
    "idct2",
    "replicate_pad1",
    "resize_spectrum",
    "resolve_method",
    "set_auto_threshold",
    "softball",
    "stable_coefficients",
    "wave_propagate",
    "wave_transfer",
]
