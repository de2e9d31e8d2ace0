"""The classification recipes (``pdevision.data.RECIPES``): keyword-only fields, values pinned."""

from __future__ import annotations

import dataclasses

import pytest

from pdevision.data import RECIPES, Recipe

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
