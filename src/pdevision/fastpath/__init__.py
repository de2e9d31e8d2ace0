"""The CPU fast path, in one place behind one switch: oneDNN kernels for the library's models (and timm's).

The model code in :mod:`pdevision.layers` and :mod:`pdevision.models` is plain PyTorch; it runs as written on a GPU,
under ``torch.ao`` quantization, FX, ``torch.export``, ONNX and ``torch.compile``. On a CPU, where PyTorch's matrix
library is not always the fastest one (``benchmarks/bench_cpu_perf/``), :func:`accelerate` swaps a model's modules for
subclasses that run the same function on oneDNN (:mod:`pdevision.fastpath.modules`), in place, keeping every
parameter and the state dict::

    model = timm.create_model("vheat_tiny").eval()
    fold_for_inference(model, 224, inplace=True)  # pdevision.models.factory: plain folding (vHeat's decay factors)
    accelerate(model)  # the CPU kernels; same logits to float32 rounding

The switch for the whole process is :func:`~pdevision.fastpath.kernels.set_fused_kernels` (and the context
:func:`~pdevision.fastpath.kernels.no_fused_kernels`): with it off, an accelerated model runs its plain forward.
The training loop accelerates float32 CPU training (``RunConfig.fused_kernels``), ``pdevision bench`` the models it
measures.
"""

from __future__ import annotations

import torch
from timm.layers import GELU as TimmGELU
from timm.layers import Mlp
from torch import nn

from pdevision.fastpath.kernels import fused_optimizer_supported, no_fused_kernels, set_fused_kernels
from pdevision.fastpath.modules import (
    ChunkedMlp,
    FusedConv2d,
    FusedDerivativeConv,
    FusedHcRaBlock,
    FusedLinear,
    fused_spectral_class,
)
from pdevision.layers import ConvDownsample, ConvStem, MixerBlock, RefinementActivation, SpectralOperator
from pdevision.layers.hcl import HcDownsample, HcRaBlock, HcStem, RefinementMlp
from pdevision.layers.hyperbolic import DerivativeConv

__all__ = [
    "accelerate",
    "fused_optimizer_supported",
    "is_accelerated",
    "no_fused_kernels",
    "on_device",
    "set_fused_kernels",
]

# convolutions followed by a norm that reads NHWC memory; HcNet's, whose blocks run on NHWC memory when accelerated
_CHANNELS_LAST = (ConvStem, ConvDownsample, HcStem, HcDownsample)


def accelerate(model: nn.Module) -> nn.Module:
    """Put ``model``'s modules on the CPU kernels, in place, and return it: spectral operators, linear layers (an
    MLP's exact GELU fused into its first product), convolutions (bfloat16 weights cast once), the token-wise MLPs
    of mixer blocks (chunked in inference), stems and downsampling channels-last, HcNet's blocks on NHWC memory,
    PDE-ResNet's shared derivative bank in bfloat16 as one convolution over single-channel images. Same parameters,
    same state dict, same function. Applying it twice changes nothing."""
    for module in list(model.modules()):
        if isinstance(module, SpectralOperator):
            module.__class__ = fused_spectral_class(type(module))
        elif isinstance(module, MixerBlock) and type(module.mlp) is Mlp and _token_wise(module.mlp):
            module.mlp.__class__ = ChunkedMlp
        elif type(module) is HcRaBlock and type(module.mlp) is RefinementMlp and _exact_gelu(module.mlp.act):
            module.__class__ = FusedHcRaBlock
        elif type(module) is DerivativeConv and module.shared and module.bank == module.splits:
            module.__class__ = FusedDerivativeConv
        elif isinstance(module, _CHANNELS_LAST):
            module.to(memory_format=torch.channels_last)
    _fuse_mlp_gelus(model)
    for module in list(model.modules()):
        if type(module) is nn.Linear:
            module.__class__ = FusedLinear
        elif type(module) is nn.Conv2d:
            module.__class__ = FusedConv2d
    return model


def on_device(model: nn.Module, device: torch.device | str) -> nn.Module:
    """``model`` moved to ``device``, and on the CPU kernels there (what the commands that run a checkpoint do)."""
    device = torch.device(device)
    model.to(device)
    return accelerate(model) if device.type == "cpu" else model


def is_accelerated(model: nn.Module) -> bool:
    """Whether :func:`accelerate` has put any of ``model``'s modules on the kernels."""
    return any(isinstance(m, FusedLinear | FusedConv2d) for m in model.modules())


def _token_wise(mlp: Mlp) -> bool:
    """An MLP of linear layers and an activation only (HcNet's refinement MLP has a depthwise filter inside)."""
    return not any(isinstance(m, RefinementActivation | nn.Conv2d) for m in mlp.modules())


def _fuse_mlp_gelus(model: nn.Module) -> None:
    """timm's ``Mlp`` (``fc1, act, ..., fc2``) and HcNet's refinement activation, whose GELU comes first: the exact
    GELU into the first linear (not GluMlp and the like, whose ``fc1`` feeds a gate)."""
    for module in list(model.modules()):
        if not isinstance(module, Mlp) or type(module.fc1) is not nn.Linear:
            continue
        act = module.act
        if _exact_gelu(act):
            module.fc1.__class__, module.act = FusedLinear, nn.Identity()
        elif isinstance(act, RefinementActivation) and _exact_gelu(act.act):
            module.fc1.__class__, act.act = FusedLinear, nn.Identity()
        else:
            continue
        module.fc1.act = "gelu"


def _exact_gelu(act: nn.Module) -> bool:
    """PyTorch's exact GELU, or timm's (``timm.layers.GELU``, ``F.gelu`` with the default exact form: the one timm's
    ConvNeXt and other peers build from ``act_layer="gelu"``)."""
    return (isinstance(act, nn.GELU) and act.approximate == "none") or type(act) is TimmGELU
