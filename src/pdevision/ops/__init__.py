"""Pure tensor functions: DCT transforms and heat kernels."""

from pdevision.ops.dct import dct2, dct_matrix, force_method, idct2, resolve_method, set_auto_threshold
from pdevision.ops.heat import frequency_energy, heat_conduct, resize_spectrum

__all__ = [
    "dct2",
    "dct_matrix",
    "force_method",
    "frequency_energy",
    "heat_conduct",
    "idct2",
    "resize_spectrum",
    "resolve_method",
    "set_auto_threshold",
]
