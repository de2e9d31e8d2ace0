"""The classification recipes (``pdevision.data.RECIPES``): keyword-only fields, values pinned."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from pdevision.data import RECIPES, Recipe, build_transforms
from pdevision.data.embedded import PathfinderClassification

SWIN = dict(
    epochs=300, warmup_epochs=20, opt="adamw", momentum=0.9, min_lr=5e-6, clip_grad=5.0,
    auto_augment="rand-m9-mstd0.5-inc1", mixup=0.8, cutmix=1.0, label_smoothing=0.1, re_prob=0.25, hflip=0.5,
    color_jitter=0.4, scale=(0.08, 1.0), crop_pct=0.875,
)  # fmt: skip
VHEAT = dict(name="vheat", lr=5e-4, lr_batch=512, weight_decay=0.08, ema_decay=0.9999, **SWIN)
BEFORE = {
    "light": dict(
        name="light", epochs=30, warmup_epochs=2, lr=8e-3, lr_batch=512, opt="adamw", momentum=0.9, min_lr=1e-5,
        weight_decay=0.05, clip_grad=5.0, auto_augment=None, mixup=0.0, cutmix=0.0, label_smoothing=0.1, re_prob=0.0,
        hflip=0.0, color_jitter=0.0, scale=(0.8, 1.0), ema_decay=None, crop_pct=1.0,
    ),
    "pderesnet": dict(
        name="pderesnet", epochs=50, warmup_epochs=5, lr=0.3, lr_batch=192, opt="sgd", momentum=0.9, min_lr=0.0,
        weight_decay=2e-5, clip_grad=None, auto_augment=None, mixup=0.0, cutmix=0.0, label_smoothing=0.1, re_prob=0.0,
        hflip=0.5, color_jitter=0.4, scale=(0.08, 1.0), ema_decay=None, crop_pct=0.875,
    ),
    "pathfinder": dict(
        name="pathfinder", epochs=30, warmup_epochs=2, lr=8e-3, lr_batch=512, opt="adamw", momentum=0.9, min_lr=1e-5,
        weight_decay=0.05, clip_grad=5.0, auto_augment=None, mixup=0.0, cutmix=0.0, label_smoothing=0.1, re_prob=0.0,
        hflip=0.5, color_jitter=0.0, scale=(1.0, 1.0), ema_decay=None, crop_pct=1.0,
    ),
    "hcnet": dict(name="hcnet", lr=1e-3, lr_batch=256, weight_decay=0.05, ema_decay=None, **SWIN),
    "vheat": VHEAT,
    "imagenet": VHEAT,
}  # fmt: skip


def test_every_recipe_keeps_its_values() -> None:
    assert set(RECIPES) == set(BEFORE)
    for name, recipe in RECIPES.items():
        assert dataclasses.asdict(recipe) == BEFORE[name], name


def test_a_recipe_takes_keywords_only() -> None:
    assert Recipe(**BEFORE["light"]) == Recipe()
    with pytest.raises(TypeError, match="positional"):
        Recipe("light", 30)


def test_the_pathfinder_recipe_keeps_every_pixel_or_mirrors_the_image() -> None:
    """No crop and no resampling: each training view is the image or its mirror, so no dot is cut off."""
    train, _ = build_transforms(RECIPES["pathfinder"], 32, (0.5,) * 3, (0.5,) * 3)
    image, _ = PathfinderClassification("pathfinder-6", "val")[0]
    grey = np.asarray(image)[..., 0].astype(np.float32)
    torch.manual_seed(0)
    seen = set()
    for _ in range(12):
        view = (train(image)[0].numpy() * 0.5 + 0.5) * 255
        same, mirrored = np.abs(view - grey).max() < 1e-3, np.abs(view - grey[:, ::-1]).max() < 1e-3
        assert same or mirrored
        seen.add(bool(mirrored))
    assert seen == {True, False}
