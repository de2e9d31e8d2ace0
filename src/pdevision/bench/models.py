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


def build_for_bench(
    name: str, img_size: int, device: torch.device, fold: bool = True, train: bool = False
) -> nn.Module:
    """The model at ``img_size`` (its native grid for Swin/DeiT/vHeat), folded for inference with
    timm's ``reparameterize_model`` (vHeat: decay factors precomputed for ``img_size``)."""
    model = build_model(name, img_size=img_size).to(device)
    if train:
        return model.train()
    model.eval()
    return fold_for_inference(model, img_size, inplace=True) if fold else model
