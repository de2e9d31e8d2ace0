"""Training recipes (one dataclass each, with its source) and timm transforms.

``light`` (the default) suits small data sets such as the embedded digits; ``pderesnet``, ``hcnet`` and ``vheat``
are the ImageNet set-ups of the papers; ``imagenet`` is an alias of ``vheat``. The learning rate of a recipe is the
peak rate at its own reference batch ``lr_batch`` and is scaled linearly with the global batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_transform
from torchvision.transforms import Compose, Grayscale


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Augmentation, regularisation and optimisation defaults; every field is a CLI flag."""

    name: str = "light"
    epochs: int = 30
    warmup_epochs: int = 2
    lr: float = 8e-3  # peak learning rate at a global batch of ``lr_batch``; scaled linearly with the batch
    lr_batch: int = 512
    opt: str = "adamw"  # a timm.optim.create_optimizer_v2 name
    momentum: float = 0.9  # SGD-type optimizers only
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    clip_grad: float | None = 5.0
    auto_augment: str | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    label_smoothing: float = 0.1
    re_prob: float = 0.0
    hflip: float = 0.0
    color_jitter: float = 0.0
    scale: tuple[float, float] = (0.8, 1.0)
    ema_decay: float | None = None
    crop_pct: float = 1.0


@dataclass(frozen=True, kw_only=True)
class LightRecipe(Recipe):
    """Short runs on small data (the embedded 8x8 digits upsampled): AdamW, 30 epochs, light crops, no flips
    (digits are not mirror-symmetric). Chosen for this library's demos, not taken from a paper."""


@dataclass(frozen=True, kw_only=True)
class PathfinderRecipe(LightRecipe):
    """The light recipe without crops, with mirror flips: on Pathfinder a crop can cut a dot off or a path apart and
    so change the label, and a mirrored image keeps it. Chosen for this library's Pathfinder comparison
    (``benchmarks/archive/pathfinder_mixers``); Long Range Arena trains its sequence models on Pathfinder without
    augmentation."""

    name: str = "pathfinder"
    scale: tuple[float, float] = (1.0, 1.0)
    hflip: float = 0.5


@dataclass(frozen=True, kw_only=True)
class PdeResNetRecipe(Recipe):
    """PDE-ResNet (PDE-ConvNet paper, arXiv:2308.01621, section 5). The paper trains with timm's ResNeXt-50 script
    (ResNet strikes back): SGD, cosine schedule, 5 warm-up epochs, batch 192, but a peak rate of 0.3 (not 0.6) and
    50 epochs, at 224x224 on a 100-class ImageNet subset. SGD here is timm's ``sgd`` (Nesterov momentum). Momentum,
    weight decay, final rate, clipping and augmentation are left unstated there; those fields hold the defaults of
    timm's ``train.py`` (momentum 0.9, weight decay 2e-5, label smoothing 0.1, flips 0.5, colour jitter 0.4,
    random-resized crops 0.08-1, no mixup, cutmix, random erasing, EMA or clipping), not values from the paper."""

    name: str = "pderesnet"
    epochs: int = 50
    warmup_epochs: int = 5
    lr: float = 0.3
    lr_batch: int = 192
    opt: str = "sgd"
    momentum: float = 0.9
    min_lr: float = 0.0
    weight_decay: float = 2e-5
    clip_grad: float | None = None
    label_smoothing: float = 0.1
    hflip: float = 0.5
    color_jitter: float = 0.4
    scale: tuple[float, float] = (0.08, 1.0)
    crop_pct: float = 0.875


@dataclass(frozen=True, kw_only=True)
class SwinImageNetRecipe(Recipe):
    """Swin's ImageNet-1K set-up (arXiv:2103.14030), which vHeat and HcNet follow: AdamW, 300 epochs with 20 of
    warm-up, cosine to 5e-6, gradient clip 5, RandAugment m9, mixup 0.8, cutmix 1.0, label smoothing 0.1, random
    erasing 0.25. The two recipes below change only what their papers (or configurations) state."""

    epochs: int = 300
    warmup_epochs: int = 20
    opt: str = "adamw"
    min_lr: float = 5e-6
    clip_grad: float | None = 5.0
    auto_augment: str | None = "rand-m9-mstd0.5-inc1"
    mixup: float = 0.8
    cutmix: float = 1.0
    label_smoothing: float = 0.1
    re_prob: float = 0.25
    hflip: float = 0.5
    color_jitter: float = 0.4
    scale: tuple[float, float] = (0.08, 1.0)
    crop_pct: float = 0.875


@dataclass(frozen=True, kw_only=True)
class HcNetRecipe(SwinImageNetRecipe):
    """HcNet (HcNet paper, ImageNet-1K implementation details): the paper states AdamW for 300 epochs, cosine decay
    after 20 linear warm-up epochs, peak rate 1e-3 at batch 256 and weight decay 0.05, and says it keeps most of
    Swin's augmentation and regularisation without naming which. So the other fields are Swin's, and no EMA."""

    name: str = "hcnet"
    lr: float = 1e-3
    lr_batch: int = 256
    weight_decay: float = 0.05


@dataclass(frozen=True, kw_only=True)
class VHeatRecipe(SwinImageNetRecipe):
    """vHeat on ImageNet-1K: Swin's set-up at 5e-4 per 512 images, weight decay 0.08, EMA 0.9999. The vHeat texts
    in the papers folder (CVPR version, article) do not list the ImageNet hyper-parameters; these are the values
    of this library's earlier ``imagenet`` recipe (vHeat's released training configuration), not numbers checked
    against a paper."""

    name: str = "vheat"
    lr: float = 5e-4
    lr_batch: int = 512
    weight_decay: float = 0.08
    ema_decay: float | None = 0.9999


RECIPES: dict[str, Recipe] = {
    "light": LightRecipe(),
    "pathfinder": PathfinderRecipe(),
    "pderesnet": PdeResNetRecipe(),
    "hcnet": HcNetRecipe(),
    "vheat": VHeatRecipe(),
    "imagenet": VHeatRecipe(),  # alias kept for earlier command lines
}


def build_transforms(
    recipe: Recipe,
    img_size: int,
    mean: tuple[float, ...] = IMAGENET_DEFAULT_MEAN,
    std: tuple[float, ...] = IMAGENET_DEFAULT_STD,
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
    """The evaluation transform of a checkpoint: its image size and normalisation, the ``light`` crop; images made
    grey first for a model of one input channel (``model_args["in_chans"]``, as a timm file of a grey model has it)."""
    mean = tuple(meta.get("mean") or IMAGENET_DEFAULT_MEAN)  # a checkpoint without them: timm's default, not KeyError
    std = tuple(meta.get("std") or IMAGENET_DEFAULT_STD)
    size = meta["img_size"]  # a side, or (height, width) as timm's transforms take it
    _, val = build_transforms(
        RECIPES["light"], tuple(size) if isinstance(size, (list, tuple)) else int(size), mean, std
    )
    args = meta.get("model_args")
    if isinstance(args, dict) and args.get("in_chans") == 1:
        return Compose([Grayscale(1), val])
    return val
