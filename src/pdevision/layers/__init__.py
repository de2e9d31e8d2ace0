"""nn.Modules built from ops: the spectral operators (heat, wave), shared blocks, stems and downsampling, QB-Heat's
extrapolator and pixel decoders."""

from pdevision.layers.blocks import ConvDownsample, ConvStem, MixerBlock, run_block
from pdevision.layers.hcl import HeatConductionLayer, HeatConductionMixer, RefinementActivation, refinement_act_layer
from pdevision.layers.hco import HeatConductionOperator
from pdevision.layers.heat_extrapolator import HeatExtrapolator
from pdevision.layers.hyperbolic import (
    ACTIVATIONS,
    BILINEAR_FORMS,
    EQUATIONS,
    LIBRARY_VARIANTS,
    MIXED_EQUATIONS,
    PAPER_EQUATIONS,
    BoundedActivation,
    DerivativeConv,
    HyperbolicBlock,
    ResNetStem,
    create_activation,
    derivative_stencils,
)
from pdevision.layers.spectral import SpectralOperator, spectral_filter
from pdevision.layers.wave import WavePropagationOperator

__all__ = [
    "ACTIVATIONS",
    "BILINEAR_FORMS",
    "EQUATIONS",
    "LIBRARY_VARIANTS",
    "MIXED_EQUATIONS",
    "PAPER_EQUATIONS",
    "BoundedActivation",
    "ConvDownsample",
    "ConvStem",
    "DerivativeConv",
    "HeatConductionLayer",
    "HeatConductionMixer",
    "HeatConductionOperator",
    "HeatExtrapolator",
    "HyperbolicBlock",
    "MixerBlock",
    "RefinementActivation",
    "ResNetStem",
    "SpectralOperator",
    "WavePropagationOperator",
    "create_activation",
    "derivative_stencils",
    "refinement_act_layer",
    "run_block",
    "spectral_filter",
]
