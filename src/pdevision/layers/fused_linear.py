"""Inference folding: linear layers on the fused oneDNN kernels of :mod:`pdevision.ops.fused`.

:func:`fuse_linears` swaps a model's ``nn.Linear`` layers for :class:`InferenceLinear` (same parameters, same state
dict) and fuses an MLP's exact GELU into its first linear. Layout: ``(..., in_features)`` in, ``(..., out_features)``
out, as ``nn.Linear``.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import Mlp
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from pdevision.layers.hcl import RefinementActivation
from pdevision.ops import fused


class InferenceLinear(nn.Linear):
    """``nn.Linear`` (same parameters and state-dict keys) whose CPU forward runs on
    :func:`pdevision.ops.fused.linear`: without autograd one oneDNN product with the following activation fused
    (``act``: ``"none"``, ``"gelu"``, ``"silu"``), in float32 training the forward and gradient products on oneDNN
    and the activation after them. On other devices, under autocast with autograd, or under
    :func:`pdevision.ops.fused.reference_kernels` it computes ``act(F.linear(x, weight, bias))`` as before. The name
    is kept from when it served inference only."""

    act: str = "none"

    @classmethod
    def from_linear(cls, linear: nn.Linear, act: str = "none") -> InferenceLinear:
        """A module sharing ``linear``'s parameters (no copy)."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias
        new.act = act
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "_cast_cache" not in self.__dict__:
            self._cast_cache: dict[Any, Any] = {}
        cache = None if is_fx_symbolic_tracing() else self._cast_cache  # not a graph constant
        return fused.linear(x, self.weight, self.bias, self.act, cache=cache)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", act={self.act}" if self.act != "none" else "")


def fuse_linears(model: nn.Module) -> int:
    """Swap every ``nn.Linear`` of ``model`` for an :class:`InferenceLinear` sharing its parameters, in place, and
    fuse an MLP's exact GELU into its first linear (timm's ``Mlp``: ``fc1, act, ..., fc2``; HcNet's refinement
    activation, whose GELU comes first). The function and the state dict are unchanged (keys and values); only the
    CPU forward takes the oneDNN kernels (inference, and float32 training). Returns the number of linears swapped."""
    for module in list(model.modules()):
        if type(module) is not Mlp or type(module.fc1) is not nn.Linear:  # not GluMlp & co: fc1 feeds a gate there
            continue
        fc1, act = module.fc1, module.act
        if isinstance(act, nn.GELU) and act.approximate == "none":
            module.fc1, module.act = InferenceLinear.from_linear(fc1, "gelu"), nn.Identity()
        elif isinstance(act, RefinementActivation) and isinstance(act.act, nn.GELU) and act.act.approximate == "none":
            module.fc1, act.act = InferenceLinear.from_linear(fc1, "gelu"), nn.Identity()
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, InferenceLinear.from_linear(child))
                count += 1
    return count + sum(1 for m in model.modules() if isinstance(m, InferenceLinear) and m.act == "gelu")
