"""Models as the benchmark runs them: eval mode, folded for inference at the measured resolution."""

from __future__ import annotations

import torch
from torch import nn

from pdevision.models.factory import build_model, fold_for_inference

DEFAULT_PEERS: tuple[str, ...] = (
    "swin_tiny_patch4_window7_224",
    "convnext_tiny",
    "deit_small_patch16_224",
    "resnet50",
)
LARGER_PEERS: dict[str, tuple[str, ...]] = {
    "small": ("swin_small_patch4_window7_224", "convnext_small", "deit_base_patch16_224", "resnet101"),
    "base": ("swin_base_patch4_window7_224", "convnext_base", "deit_base_patch16_224", "resnet152"),
}


def fuse_conv_batchnorm(model: nn.Module) -> nn.Module:
    """An eval-mode model with each BatchNorm that follows a convolution folded into it (``torch.fx``'s
    ``optimization.fuse``, a traced copy); the model itself when it has no BatchNorm or does not trace."""
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return model
    from torch.fx.experimental.optimization import fuse

    try:
        return fuse(model)
    except Exception:  # not traceable: measured as it is
        return model


def build_for_bench(
    name: str, img_size: int, device: torch.device, fold: bool = True, train: bool = False
) -> nn.Module:
    """The model at ``img_size`` (its native grid for Swin/DeiT/vHeat), folded for inference with
    timm's ``reparameterize_model`` and the model's own ``reparameterize`` (vHeat: decay factors precomputed for
    ``img_size``; vHeat, HcNet: linear layers on the fused kernels), then PDE-ResNet's BatchNorms folded
    (``fold_batchnorm``); a peer's BatchNorms are folded into its convolutions (:func:`fuse_conv_batchnorm`), so
    both sides run without them."""
    model = build_model(name, img_size=img_size).to(device)
    if train:
        return model.train()
    model.eval()
    if not fold:
        return model
    model = fold_for_inference(model, img_size, inplace=True)
    if hasattr(model, "fold_batchnorm"):  # PDE-ResNet's own folding
        model.fold_batchnorm()
        return model
    return model if hasattr(model, "reparameterize") else fuse_conv_batchnorm(model)
