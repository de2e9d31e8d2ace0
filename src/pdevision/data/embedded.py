"""Embedded classification sets, selected by name (``--data NAME``); nothing is downloaded.

* ``digits``: scikit-learn's handwritten digits (:class:`pdevision.data.datasets.DigitsDataset`), the default.
* ``scenes``: "which digit is in this cluttered scene": one real handwritten digit scan pasted with a
  random scale, rotation and colour onto a crop of a bundled photograph, among 1-3 pasted real face crops
  (:mod:`pdevision.data.scenes`), plus Gaussian pixel noise. 10 classes, 5,000 train / 1,000 val scenes,
  exactly balanced, disjoint digit scans, faces and photo regions between the splits, generator seed 0.

Generated sets are cached in memory for the process (keyed by name, split, size and the generator's
version), never written to disk.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from pdevision.data.datasets import DataError, DigitsDataset
from pdevision.data.scenes import VERSION, SceneConfig, make_scene


@dataclass(frozen=True)
class SceneSetSpec:
    """A scene classification set: the digit class of the scene's single digit is the label."""

    n_train: int
    n_val: int
    config: SceneConfig
    noise: float  # standard deviation of Gaussian pixel noise, in 0..255 units
    seed: int = 0
    description: str = ""


SCENE_SETS: dict[str, SceneSetSpec] = {
    "scenes": SceneSetSpec(
        n_train=5000,
        n_val=1000,
        config=SceneConfig(
            n_digits=(1, 1),
            n_faces=(1, 2),
            digit_scale=(0.4, 0.65),
            face_scale=(0.25, 0.4),
            rotation=20.0,
            min_contrast=0.25,
            digits_on_top=True,
        ),
        noise=6.0,
        description="which of 10 digits is in a cluttered photo scene (distractor faces, noise)",
    ),
}


def embedded_names() -> list[str]:
    """Names of the embedded sets, the default first."""
    return ["digits", *SCENE_SETS]


def is_embedded(name: object) -> bool:
    """Whether ``name`` names an embedded set (and not a folder)."""
    return isinstance(name, str) and name in embedded_names()


@functools.lru_cache(maxsize=8)
def scene_arrays(name: str, split: str, size: int, version: int = VERSION) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, size, size, 3) uint8 and labels (n,) of a scene set's split, generated once per process."""
    spec = SCENE_SETS[name]
    n = spec.n_train if split == "train" else spec.n_val
    cfg = SceneConfig(**{**spec.config.__dict__, "size": size})
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64) % 10
    for i in range(n):
        scene = make_scene(spec.seed, split, i, cfg, digit_labels=[int(labels[i])])
        image = scene.image.astype(np.float64)
        if spec.noise > 0:
            noise_rng = np.random.default_rng([spec.seed, 2, i, 0 if split == "train" else 1, version])
            image = image + noise_rng.normal(0.0, spec.noise, image.shape)
        images[i] = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return images, labels


class SceneClassification(Dataset):
    """An embedded scene classification set (see :data:`SCENE_SETS`) yielding ``(PIL RGB, label)``."""

    def __init__(self, name: str, split: str = "train", img_size: int = 64, transform: Callable | None = None) -> None:
        if name not in SCENE_SETS:
            raise DataError(f"unknown scene set {name!r}; choose one of {sorted(SCENE_SETS)}")
        if split not in ("train", "val"):
            raise DataError(f"scene split must be 'train' or 'val', got {split!r}")
        self.images, labels = scene_arrays(name, split, int(img_size))
        self.targets = labels.tolist()
        self.classes = [str(c) for c in range(10)]
        self.transform = transform
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = Image.fromarray(self.images[index])
        return (self.transform(img) if self.transform else img), self.targets[index]


def build_embedded(
    name: str, img_size: int, train_transform: Callable | None, val_transform: Callable | None
) -> tuple[Dataset, Dataset]:
    """Train and validation sets of the embedded set ``name``."""
    if name == "digits":
        return DigitsDataset("train", img_size, train_transform), DigitsDataset("val", img_size, val_transform)
    if name in SCENE_SETS:
        return (
            SceneClassification(name, "train", img_size, train_transform),
            SceneClassification(name, "val", img_size, val_transform),
        )
    raise DataError(f"unknown embedded data set {name!r}; choose one of {embedded_names()}")
