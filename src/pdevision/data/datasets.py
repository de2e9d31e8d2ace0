"""Datasets: the embedded default (scikit-learn's handwritten digits) and ImageFolder trees.

Both yield ``(PIL.Image RGB, class index)`` so the same timm transforms apply, and expose
``classes`` (names) and ``targets`` (indices).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


class DataError(ValueError):
    """A data set that cannot be used as given (missing, empty, inconsistent)."""


def stratified_split(targets: Sequence[int], val_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices of a fixed stratified train/val split (scikit-learn's ``train_test_split``)."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"the validation fraction must be between 0 and 1, got {val_fraction}")
    counts = np.bincount(np.asarray(targets))
    if len(targets) and counts[counts > 0].min() < 2:
        rare = [int(c) for c in np.flatnonzero((counts > 0) & (counts < 2))]
        raise DataError(f"cannot split classes with a single image into train and val (class indices {rare})")
    idx = np.arange(len(targets))
    train, val = train_test_split(idx, test_size=val_fraction, stratify=np.asarray(targets), random_state=seed)
    return sorted(train.tolist()), sorted(val.tolist())


class DigitsDataset(Dataset):
    """scikit-learn's bundled handwritten digits (1,797 real 8x8 scans, 10 classes) as RGB images.

    The 8x8 images (0..16) are scaled to 0..255 and upsampled bicubically to ``img_size`` (64 by
    default, so a stride-32 backbone still has a 2x2 last map). ``split`` is ``"train"`` (80%),
    ``"val"`` (20%, stratified, fixed seed) or ``"all"``.
    """

    def __init__(self, split: str = "train", img_size: int = 64, transform: Callable | None = None) -> None:
        from sklearn.datasets import load_digits

        if split not in ("train", "val", "all"):
            raise DataError(f"digits split must be 'train', 'val' or 'all', got {split!r}")
        digits = load_digits()
        images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
        targets = digits.target.astype(int).tolist()
        if split == "all":
            keep = list(range(len(targets)))
        else:
            train, val = stratified_split(targets, 0.2, seed=0)
            keep = train if split == "train" else val
        self.images = images[keep]
        self.targets = [targets[i] for i in keep]
        self.classes = [str(c) for c in range(10)]
        self.img_size = img_size
        self.transform = transform
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = Image.fromarray(self.images[index]).resize((self.img_size, self.img_size), Image.BICUBIC)
        img = img.convert("RGB")
        return (self.transform(img) if self.transform else img), self.targets[index]


def _readable(path: Path) -> str | None:
    """``None`` if the file decodes completely as an image, else the reason it does not."""
    try:
        with Image.open(path) as img:
            img.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def scan_folder(root: Path, verify: bool = True) -> tuple[list[str], list[tuple[str, int]], list[str]]:
    """Classes (sub-folder names), ``(path, class index)`` samples and skipped files of ``root``.

    With ``verify`` every file is decoded once; unreadable or truncated files are skipped with
    one warning each.
    """
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"data path {root} is not a folder")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise DataError(f"data folder {root} has no class sub-folders (expected {root}/<class>/<image>)")
    samples: list[tuple[str, int]] = []
    skipped: list[str] = []
    for index, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(root / name, followlinks=True)):
            for file in sorted(files):
                if not file.lower().endswith(IMAGE_EXTENSIONS):
                    continue
                path = Path(dirpath) / file
                reason = _readable(path) if verify else None
                if reason is not None:
                    log.warning("skipping unreadable image %s (%s)", path, reason)
                    skipped.append(str(path))
                    continue
                samples.append((str(path), index))
    if not samples:
        raise DataError(f"data folder {root} has no readable images in its class sub-folders {classes}")
    return classes, samples, skipped


class FolderDataset(Dataset):
    """An ImageFolder tree ``root/<class>/<image>``; images are converted to RGB (grayscale, palette,
    RGBA). ``indices`` selects a subset (for a split of one folder)."""

    def __init__(
        self,
        root: str | Path,
        transform: Callable | None = None,
        indices: Sequence[int] | None = None,
        scan: tuple[list[str], list[tuple[str, int]], list[str]] | None = None,
        verify: bool = True,
    ) -> None:
        self.root = Path(root)
        classes, samples, skipped = scan or scan_folder(self.root, verify=verify)
        if indices is not None:
            samples = [samples[i] for i in indices]
        self.classes = classes
        self.samples = samples
        self.targets = [t for _, t in samples]
        self.skipped = skipped
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, target = self.samples[index]
        with Image.open(path) as img:
            if img.mode == "P" and "transparency" in img.info:
                img = img.convert("RGBA")
            rgb = img.convert("RGB")
        return (self.transform(rgb) if self.transform else rgb), target


def build_datasets(
    data: str | Path | None,
    img_size: int = 64,
    val_split: float = 0.2,
    train_transform: Callable | None = None,
    val_transform: Callable | None = None,
    verify: bool = True,
) -> tuple[Dataset, Dataset]:
    """Train and validation sets: the embedded digits when ``data`` is ``None``, an embedded set when it
    is one's name (:mod:`pdevision.data.embedded`; write ``./NAME`` for a folder of that name); otherwise
    an ImageFolder tree with ``train/`` and ``val/`` sub-folders, or one tree split ``val_split``."""
    from pdevision.data.embedded import build_embedded, is_embedded

    if data is None or is_embedded(data):
        return build_embedded(str(data or "digits"), img_size, train_transform, val_transform)
    root = Path(data)
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if (root / "train").is_dir() and (root / "val").is_dir():
        train = FolderDataset(root / "train", train_transform, verify=verify)
        val = FolderDataset(root / "val", val_transform, verify=verify)
        if train.classes != val.classes:
            only_train = sorted(set(train.classes) - set(val.classes))
            only_val = sorted(set(val.classes) - set(train.classes))
            raise DataError(f"train and val class folders differ: only in train {only_train}, only in val {only_val}")
        return train, val
    scan = scan_folder(root, verify=verify)
    targets = [t for _, t in scan[1]]
    train_idx, val_idx = stratified_split(targets, val_split, seed=0)
    return (
        FolderDataset(root, train_transform, train_idx, scan=scan),
        FolderDataset(root, val_transform, val_idx, scan=scan),
    )
