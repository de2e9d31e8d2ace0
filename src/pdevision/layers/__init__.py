"""nn.Modules built from ops: the heat operator, shared blocks, stems and downsampling."""

from pdevision.layers.blocks import ConvDownsample, ConvStem, MixerBlock
from pdevision.layers.hco import HeatConductionOperator

__all__ = ["ConvDownsample", "ConvStem", "HeatConductionOperator", "MixerBlock"]
