"""Embedded digits and ImageFolder trees: conversion, skipping unreadable files, splits, errors."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pdevision.data import DataError, DigitsDataset, build_datasets, scan_folder


def test_digits_fixed_stratified_split() -> None:
    train, val = DigitsDataset("train"), DigitsDataset("val")
    assert len(train) + len(val) == 1797
    assert len(val) == 360
    # stratified: every class holds ~20% of its images in val
    counts_all = Counter(DigitsDataset("all").targets)
    for c, n in Counter(val.targets).items():
        assert abs(n / counts_all[c] - 0.2) < 0.02
    img, _ = train[0]
    assert img.size == (64, 64) and img.mode == "RGB"
    assert DigitsDataset("train").targets == train.targets  # fixed
    assert DigitsDataset("val", img_size=32)[0][0].size == (32, 32)


def _make_tree(root: Path) -> None:
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i in range(4):
            arr = (rng.random((20, 24, 3)) * 255).astype(np.uint8)
            Image.fromarray(arr).save(root / cls / f"rgb{i}.png")
    Image.fromarray((rng.random((20, 24)) * 255).astype(np.uint8), mode="L").save(root / "cat" / "gray.png")
    Image.fromarray((rng.random((20, 24)) * 255).astype(np.uint8), mode="L").convert("P").save(root / "dog" / "pal.png")
    rgba = Image.fromarray((rng.random((20, 24, 4)) * 255).astype(np.uint8), mode="RGBA")
    rgba.save(root / "dog" / "alpha.png")
    (root / "cat" / "broken.jpg").write_bytes(b"not an image at all")
    good = root / "dog" / "rgb0.png"
    (root / "dog" / "truncated.png").write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    (root / "cat" / "notes.txt").write_text("ignored: not an image extension")


def test_folder_converts_modes_and_skips_unreadable(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _make_tree(tmp_path)
    with caplog.at_level(logging.WARNING):
        classes, samples, skipped = scan_folder(tmp_path)
    assert classes == ["cat", "dog"]
    assert sorted(Path(s).name for s in skipped) == ["broken.jpg", "truncated.png"]
    assert sum("skipping unreadable image" in r.message for r in caplog.records) == 2
    train, val = build_datasets(tmp_path, val_split=0.25)
    assert len(train) + len(val) == len(samples) == 11
    for ds in (train, val):
        for i in range(len(ds)):
            img, _ = ds[i]
            assert img.mode == "RGB"
    assert len(train.skipped) == 2


def test_train_val_folders_must_agree(tmp_path: Path) -> None:
    for split, classes in (("train", ["a", "b", "c"]), ("val", ["a", "b", "d"])):
        for c in classes:
            (tmp_path / split / c).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / c / "x.png")
    with pytest.raises(DataError, match=r"only in train \['c'\], only in val \['d'\]"):
        build_datasets(tmp_path)


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "no class sub-folders"),
        (lambda p: (p / "a").mkdir(parents=True), "no readable images"),
    ],
)
def test_bad_folders_are_clear_errors(tmp_path: Path, setup, match: str) -> None:
    root = tmp_path / "data"
    setup(root)
    with pytest.raises(DataError, match=match):
        build_datasets(root)
