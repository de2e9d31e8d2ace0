"""Training recipes and timm transforms.

``light`` suits small data sets such as the embedded digits; ``imagenet`` is the vHeat / Swin
ImageNet-1K recipe (RandAugment m9, mixup 0.8, cutmix 1.0, label smoothing 0.1, random erasing
0.25, AdamW lr 5e-4 per 512 images, weight decay 0.08, 300 epochs with 20 of warmup, gradient clip
5, EMA 0.9999).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timm.data import create_transform


@dataclass(frozen=True)
class Recipe:
    """Augmentation, regularisation and optimisation defaults; every field is a CLI flag."""

    name: str
    epochs: int
    warmup_epochs: int
    lr: float  # for a global batch of 512; scaled linearly with the batch size
    min_lr: float
    weight_decay: float
    clip_grad: float | None
    auto_augment: str | None
    mixup: float
    cutmix: float
    label_smoothing: float
    re_prob: float
    hflip: float
    color_jitter: float
    scale: tuple[float, float]
    ema_decay: float | None
    crop_pct: float


RECIPES: dict[str, Recipe] = {
    "light": Recipe(
        name="light",
        epochs=30,
        warmup_epochs=2,
        lr=8e-3,
        min_lr=1e-5,
        weight_decay=0.05,
        clip_grad=5.0,
        auto_augment=None,
        mixup=0.0,
        cutmix=0.0,
        label_smoothing=0.1,
        re_prob=0.0,
        hflip=0.0,
        color_jitter=0.0,
        scale=(0.8, 1.0),
        ema_decay=None,
        crop_pct=1.0,
    ),
    "imagenet": Recipe(
        name="imagenet",
        epochs=300,
        warmup_epochs=20,
        lr=5e-4,
        min_lr=5e-6,
        weight_decay=0.08,
        clip_grad=5.0,
        auto_augment="rand-m9-mstd0.5-inc1",
        mixup=0.8,
        cutmix=1.0,
        label_smoothing=0.1,
        re_prob=0.25,
        hflip=0.5,
        color_jitter=0.4,
        scale=(0.08, 1.0),
        ema_decay=0.9999,
        crop_pct=0.875,
    ),
}


def build_transforms(
    recipe: Recipe,
    img_size: int,
    mean: tuple[float, ...] = (0.485, 0.456, 0.406),
    std: tuple[float, ...] = (0.229, 0.224, 0.225),
) -> tuple[Callable, Callable]:
    """timm train and eval transforms for ``recipe`` at ``img_size`` (PIL image in, tensor out)."""
    train = create_transform(
        input_size=img_size,
        is_training=True,
        scale=recipe.scale,
        hflip=recipe.hflip,
        color_jitter=recipe.color_jitter,
        auto_augment=recipe.auto_augment,
        re_prob=recipe.re_prob,
        interpolation="bicubic",
        mean=mean,
        std=std,
    )
    val = create_transform(
        input_size=img_size, is_training=False, interpolation="bicubic", mean=mean, std=std, crop_pct=recipe.crop_pct
    )
    return train, val


def eval_transform_for(meta: dict[str, Any]) -> Callable:
    """The evaluation transform of a checkpoint: its image size and normalisation, the ``light`` crop."""
    _, val = build_transforms(RECIPES["light"], int(meta["img_size"]), tuple(meta["mean"]), tuple(meta["std"]))
    return val
