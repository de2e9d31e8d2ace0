"""Embedded classification sets, selected by name (``--data NAME``); nothing is downloaded.

* ``digits``: scikit-learn's handwritten digits (:class:`pdevision.data.digits.DigitsDataset`), the default.
* ``scenes``: "which digit is in this cluttered scene": one real handwritten digit scan (0.4-0.65 of the
  side, rotated up to +-20 degrees, one random colour at least 0.25 in luminance from the background under
  it) pasted over 1-2 real face crops (0.25-0.4 of the side) on a crop of a bundled photograph
  (:mod:`pdevision.data.scenes`), plus Gaussian pixel noise (sigma 6 of 255). 10 classes, 5,000 train /
  1,000 val scenes, exactly balanced (scene ``i`` shows digit ``i % 10``), disjoint digit scans, faces and
  photo regions between the splits, generator seed 0. Measured (``benchmarks/scenes/scenes.md``): ``vheat_micro``
  66.2% val top-1 after 15 epochs of the ``light`` recipe (about 4 CPU minutes), 56.2% after 12.

* ``pathfinder``, ``pathfinder-9``, ``pathfinder-6`` and ``pathx``: "are the two dots joined by one dashed
  path?" (:mod:`pdevision.data.pathfinder`, after Linsley et al. 2018 and Long Range Arena's Pathfinder and
  Path-X): target paths of 14, 9 or 6 dashes among 8 distractor paths of 4 dashes, one channel shown as RGB;
  2 classes, exactly balanced, 4,000 train / 1,000 val / 1,000 test images (independent streams of generator
  seed 0); 32 px by default (``pathx``: 128 px), any ``--img-size`` from 32 to 256 draws the same paths at that
  resolution.

Generated sets are cached in memory for the process (keyed by name, split, size and the generator's
version); they are written to disk only when ``PDEVISION_DATA_CACHE`` names a folder (:mod:`pdevision.data.cache`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from pdevision.data.cache import cached, digest
from pdevision.data.digits import DigitsDataset
from pdevision.data.errors import DataError
from pdevision.data.pathfinder import REFERENCE_SIZE as PATHFINDER_REFERENCE_SIZE
from pdevision.data.pathfinder import VERSION as PATHFINDER_VERSION
from pdevision.data.pathfinder import PathfinderConfig, make_pathfinder
from pdevision.data.scenes import VERSION, SceneConfig, make_scene

# generated scene sets are kept in memory whole (6,000 scenes: 2.7 GB at 384 px, 4 TB at 16384 px)
SCENES_MAX_SIZE = 384


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


@dataclass(frozen=True)
class PathfinderSetSpec:
    """A Pathfinder set: label 1 when the two dots lie on one path. ``config.size`` is the default image size."""

    n_train: int
    n_val: int
    n_test: int
    config: PathfinderConfig
    seed: int = 0
    description: str = ""


PATHFINDER_MAX_SIZE = 256  # 6,000 images of 256 px: 393 MB in memory
PATHFINDER_SETS: dict[str, PathfinderSetSpec] = {
    "pathfinder": PathfinderSetSpec(
        4000, 1000, 1000, PathfinderConfig(n_dashes=14), description="Pathfinder, 32 px, paths of 14 dashes"
    ),
    "pathfinder-9": PathfinderSetSpec(
        4000, 1000, 1000, PathfinderConfig(n_dashes=9), description="Pathfinder, 32 px, paths of 9 dashes"
    ),
    "pathfinder-6": PathfinderSetSpec(
        4000, 1000, 1000, PathfinderConfig(n_dashes=6), description="Pathfinder, 32 px, paths of 6 dashes"
    ),
    "pathx": PathfinderSetSpec(
        4000, 1000, 1000, PathfinderConfig(size=128, n_dashes=14), description="Path-X: Pathfinder at 128 px"
    ),
}


def embedded_names() -> list[str]:
    """Names of the embedded sets, the default first."""
    return ["digits", *SCENE_SETS, *PATHFINDER_SETS]


def embedded_default_size(name: str | None) -> int:
    """The image size an embedded set is trained at when no size is given: 64 px, a Pathfinder set's own."""
    spec = PATHFINDER_SETS.get(str(name))
    return spec.config.size if spec is not None else 64


def is_embedded(name: object) -> bool:
    """Whether ``name`` names an embedded set (and not a folder)."""
    return isinstance(name, str) and name in embedded_names()


def check_embedded_size(name: str, img_size: int) -> None:
    """Refuse (:class:`DataError`, one line) an image size the embedded set ``name`` cannot use sensibly."""
    if name == "digits":
        DigitsDataset.check_size(img_size)
    elif name in SCENE_SETS and not 1 <= int(img_size) <= SCENES_MAX_SIZE:
        raise DataError(
            f"image size {img_size} is more than the embedded {name!r} set can hold in memory "
            f"(it generates every scene at that size): at most {SCENES_MAX_SIZE} px; give a smaller --img-size"
        )
    elif name in PATHFINDER_SETS and not PATHFINDER_REFERENCE_SIZE <= int(img_size) <= PATHFINDER_MAX_SIZE:
        raise DataError(
            f"image size {img_size} does not suit the embedded {name!r} set: its paths are drawn at "
            f"{PATHFINDER_REFERENCE_SIZE} to {PATHFINDER_MAX_SIZE} px; give --img-size in that range"
        )


def embedded_data_of(meta: dict) -> str | None:
    """The embedded set a checkpoint was trained on (its ``data`` metadata), or ``None`` (a folder, or an older
    checkpoint): evaluation defaults to it. Anything but a known embedded name is ignored, never opened."""
    name = meta.get("data")
    return name if is_embedded(name) else None


def zoomed_out(cfg: SceneConfig, zoom_out: float) -> SceneConfig:
    """``cfg`` for a scene ``zoom_out`` times larger whose objects and background keep the pixel size they have at
    ``cfg.size / zoom_out``: digit and face scales (fractions of the side) divided by ``zoom_out``, the background
    crop (a fraction of the photo) multiplied by it, at most the whole photo. The scene then shows more clutter
    around objects of the trained size, so a model evaluated at a larger input sees no change of object scale."""
    if not (math.isfinite(zoom_out) and zoom_out >= 1.0):
        raise ValueError(f"zoom_out must be a number >= 1, got {zoom_out}")
    if zoom_out == 1.0:
        return cfg

    def shrink(r: tuple[float, float]) -> tuple[float, float]:
        return (r[0] / zoom_out, r[1] / zoom_out)

    crop = (min(1.0, cfg.crop_range[0] * zoom_out), min(1.0, cfg.crop_range[1] * zoom_out))
    return replace(cfg, digit_scale=shrink(cfg.digit_scale), face_scale=shrink(cfg.face_scale), crop_range=crop)


@functools.lru_cache(maxsize=8)
def scene_arrays(
    name: str, split: str, size: int, version: int = VERSION, zoom_out: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, size, size, 3) uint8 and labels (n,) of a scene set's split, generated once per process.
    ``zoom_out`` > 1: the same scenes' objects at the pixel size of ``size / zoom_out`` (:func:`zoomed_out`)."""
    spec = SCENE_SETS[name]
    n = spec.n_train if split == "train" else spec.n_val
    cfg = zoomed_out(SceneConfig(**{**spec.config.__dict__, "size": size}), zoom_out)

    def draw() -> tuple[np.ndarray, np.ndarray]:
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

    key = digest(spec, split=split, config=dataclasses.asdict(cfg), version=version)
    return cached(f"{name}-{split}-{size}px", key, (n, size, size, 3), draw)


class SceneClassification(Dataset):
    """An embedded scene classification set (see :data:`SCENE_SETS`) yielding ``(PIL RGB, label)``."""

    def __init__(
        self,
        name: str,
        split: str = "train",
        img_size: int = 64,
        transform: Callable | None = None,
        zoom_out: float = 1.0,
    ) -> None:
        if name not in SCENE_SETS:
            raise DataError(f"unknown scene set {name!r}; choose one of {sorted(SCENE_SETS)}")
        if split not in ("train", "val"):
            raise DataError(f"scene split must be 'train' or 'val', got {split!r}")
        check_embedded_size(name, img_size)
        self.images, labels = scene_arrays(name, split, int(img_size), zoom_out=float(zoom_out))
        self.targets = labels.tolist()
        self.classes = [str(c) for c in range(10)]
        self.transform = transform
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = Image.fromarray(self.images[index])
        return (self.transform(img) if self.transform else img), self.targets[index]


@functools.lru_cache(maxsize=8)
def pathfinder_arrays(
    name: str, split: str, size: int, version: int = PATHFINDER_VERSION, workers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, size, size) uint8 and labels (n,) of a Pathfinder set's split, generated once per process (in
    ``workers`` processes: see :func:`~pdevision.data.pathfinder.make_pathfinder`; the images do not depend on it)."""
    spec = PATHFINDER_SETS[name]
    n = {"train": spec.n_train, "val": spec.n_val, "test": spec.n_test}[split]
    config = replace(spec.config, size=size)

    def draw() -> tuple[np.ndarray, np.ndarray]:
        drawn = make_pathfinder(spec.seed, split, n, config, workers=workers)
        return drawn.images, drawn.labels

    key = digest(spec, split=split, config=dataclasses.asdict(config), version=version)
    return cached(f"{name}-{split}-{size}px", key, (n, size, size), draw)


class PathfinderClassification(Dataset):
    """An embedded Pathfinder set (see :data:`PATHFINDER_SETS`) yielding ``(PIL RGB, label)``; its grey images
    are repeated over three channels. ``split`` is ``"train"``, ``"val"`` or ``"test"``."""

    classes: ClassVar[list[str]] = ["apart", "joined"]  # label 1: the two dots lie on one path

    def __init__(
        self, name: str, split: str = "train", img_size: int | None = None, transform: Callable | None = None
    ) -> None:
        if name not in PATHFINDER_SETS:
            raise DataError(f"unknown pathfinder set {name!r}; choose one of {sorted(PATHFINDER_SETS)}")
        if split not in ("train", "val", "test"):
            raise DataError(f"pathfinder split must be 'train', 'val' or 'test', got {split!r}")
        size = int(img_size or PATHFINDER_SETS[name].config.size)
        check_embedded_size(name, size)
        self.images, labels = pathfinder_arrays(name, split, size)
        self.targets = labels.tolist()
        self.transform = transform
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = Image.fromarray(self.images[index]).convert("RGB")
        return (self.transform(img) if self.transform else img), self.targets[index]


def refuse_classification_set(data: object, reads: str) -> None:
    """A :class:`DataError` when ``data`` names an embedded classification set where a reader of ``reads`` (mask
    folders, COCO folders, image folders) was given it: it was taken for a folder of that name ("pathfinder: no such
    folder")."""
    if is_embedded(data) and not Path(str(data)).exists():
        raise DataError(
            f"--data {data} is an embedded classification set (of {', '.join(embedded_names())}); this task reads "
            f"{reads}"
        )


def embedded_classes(name: object) -> list[str] | None:
    """The class names of the embedded set ``name`` without generating it (``None``: not an embedded set), so that a
    checkpoint of other classes is refused before minutes of drawing (5,000 Pathfinder images)."""
    if not is_embedded(name):
        return None
    if name in PATHFINDER_SETS:
        return list(PathfinderClassification.classes)
    return [str(c) for c in range(10)]  # the digits, and the scene sets' digit in a scene


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
    if name in PATHFINDER_SETS:
        return (
            PathfinderClassification(name, "train", img_size, train_transform),
            PathfinderClassification(name, "val", img_size, val_transform),
        )
    raise DataError(f"unknown embedded data set {name!r}; choose one of {embedded_names()}")
