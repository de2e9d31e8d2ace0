"""Fold every BatchNorm of a PDE-ResNet into its neighbouring linear maps (eval mode)."""

from __future__ import annotations

import copy

from torch import nn


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` with every BatchNorm folded (running statistics) into the convs next
    to it, so that each block reads ``act(S u + c + A h_raw(u))``: shared or per-channel 3x3 derivative
    kernels and 1x1 channel-mixing matrices only. Logits equal the eval-mode model's; ``model`` is unchanged.
    """
    if not hasattr(model, "fold_batchnorm"):
        raise TypeError(f"{type(model).__name__} has no fold_batchnorm(); expected a PDE-ResNet")
    folded = copy.deepcopy(model).eval()
    folded.fold_batchnorm()
    return folded
