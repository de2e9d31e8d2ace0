"""Helpers shared by test modules."""

from __future__ import annotations

import torch
from torch import nn

from pdevision.layers import DerivativeConv


def randomise_bn_and_kernels(module: nn.Module, seed: int = 0, kernel_scale: float = 0.3) -> nn.Module:
    """Random BatchNorm statistics and affine parameters and random derivative kernels, so per-channel
    kernels differ and zero-initialised BatchNorms no longer hide the branches. Returns ``module``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            if isinstance(m, DerivativeConv):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * kernel_scale)
    return module
