"""The dense tasks' recipe tables: named fields, keyword-only, values as they were when they were positional."""

from __future__ import annotations

import dataclasses

import pytest

from pdevision.tasks.dense import DenseRecipe
from pdevision.tasks.detect import DETECT_RECIPES
from pdevision.tasks.segment import SEGMENT_RECIPES

SCRATCH = "this library's CPU recipe (from scratch)"
# written from the positional tables before they were rewritten with keywords
BEFORE = {
    ("detect", "light"): dict(
        lr=4e-4, batch=8, weight_decay=0.05, epochs=10, warmup_epochs=1.0, min_lr=1e-6, decoder_channels=64,
        source=SCRATCH, clip_grad=10.0, scale_range=(0.5, 2.0), photometric=True,
    ),
    ("detect", "mask_rcnn_swin_1x"): dict(
        lr=1e-4, batch=16, weight_decay=0.05, epochs=12, warmup_epochs=0.0, min_lr=0.0, decoder_channels=256,
        source="Swin arXiv:2103.14030 §4.2 (Mask R-CNN 1x, COCO), HcNet §4.2, vHeat", clip_grad=None,
        scale_range=(0.5, 2.0), photometric=True,
    ),
    ("segment", "light"): dict(
        lr=3e-3, batch=8, weight_decay=0.05, epochs=8, warmup_epochs=1.0, min_lr=1e-5, decoder_channels=64,
        source=SCRATCH, clip_grad=None, scale_range=(0.9, 1.25), photometric=False,
    ),
    ("segment", "upernet_swin"): dict(
        lr=6e-5, batch=16, weight_decay=0.01, epochs=12, warmup_epochs=1.0, min_lr=0.0, decoder_channels=512,
        source="Swin arXiv:2103.14030 §4.3 (UPerNet, ADE20K), HcNet §4.3, vHeat", clip_grad=None,
        scale_range=(0.5, 2.0), photometric=True,
    ),
}  # fmt: skip


def test_every_dense_recipe_keeps_its_values() -> None:
    now = {("detect", k): v for k, v in DETECT_RECIPES.items()}
    now |= {("segment", k): v for k, v in SEGMENT_RECIPES.items()}
    assert set(now) == set(BEFORE)
    for key, recipe in now.items():
        assert dataclasses.asdict(recipe) == BEFORE[key], key


def test_a_dense_recipe_takes_keywords_only() -> None:
    values = BEFORE[("segment", "light")]
    assert DenseRecipe(**values) == SEGMENT_RECIPES["light"]
    with pytest.raises(TypeError, match="positional"):
        DenseRecipe(*values.values())
