"""Unlabelled images for pretraining: random crops of scikit-image's sample photographs (embedded, no
download), of the training split of an embedded classification set (``data="scenes"`` or ``"digits"``, labels
unused), or of any ImageFolder tree.

Each item is ``(tensor (3, S, S), 0)``, drawn from the global torch RNG (so a resumed run that restores the RNG
state draws the same crops) and normalised with ``mean``/``std``. Photos and folders: a random resized crop
(scale 5-100% of the image, aspect 3/4-4/3), a horizontal flip with probability 0.5 and a conversion to grey with
probability 0.2. Embedded sets (images already at the training size, digits not mirror-symmetric): a random
resized crop of scale 20-100% (MAE's range), no flip, no grey.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms as T

from pdevision._optional import require
from pdevision.data.datasets import DataError, FolderDataset
from pdevision.data.embedded import build_embedded, is_embedded

log = logging.getLogger(__name__)

# scikit-image's bundled photographs (in the package, no download): colour, then grey
SAMPLE_PHOTOS: tuple[str, ...] = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "stereo_motorcycle",
    "camera",
    "coins",
    "moon",
    "page",
    "text",
    "clock",
    "brick",
    "grass",
    "gravel",
)
MAX_SIDE = 512  # photos are downscaled to at most this side once, at load time


def load_sample_photos(names: Sequence[str] = SAMPLE_PHOTOS) -> list[Image.Image]:
    """scikit-image's sample photographs as RGB PIL images (longest side at most 512 px)."""
    skimage_data = require("skimage.data", "data")
    photos = []
    for name in names:
        if not hasattr(skimage_data, name):
            raise DataError(f"scikit-image has no sample photo {name!r}")
        array = getattr(skimage_data, name)()
        array = array[0] if isinstance(array, tuple) else array  # stereo_motorcycle: (left, right, disparity)
        img = Image.fromarray(np.asarray(array)).convert("RGB")
        img.thumbnail((MAX_SIDE, MAX_SIDE), Image.BICUBIC)
        photos.append(img)
    return photos


def crop_transform(img_size: int, mean: Sequence[float], std: Sequence[float]) -> Callable:
    """Random resized crop to ``img_size``, flip, grey with probability 0.2, tensor, normalise (PIL in)."""
    return T.Compose(
        [
            T.RandomResizedCrop(img_size, scale=(0.05, 1.0), interpolation=T.InterpolationMode.BICUBIC),
            T.RandomHorizontalFlip(),
            T.RandomGrayscale(0.2),
            T.ToTensor(),
            T.Normalize(mean, std),
        ]
    )


def embedded_crop_transform(img_size: int, mean: Sequence[float], std: Sequence[float]) -> Callable:
    """For an embedded set's images: random resized crop of scale 0.2-1 to ``img_size``, tensor, normalise."""
    return T.Compose(
        [
            T.RandomResizedCrop(img_size, scale=(0.2, 1.0), interpolation=T.InterpolationMode.BICUBIC),
            T.ToTensor(),
            T.Normalize(mean, std),
        ]
    )


class RandomCrops(Dataset):
    """``length`` random crops per epoch of a list of images: item ``i`` crops image ``i % len(images)`` when
    there are at most ``length`` images (each image about equally often), otherwise an image drawn uniformly at
    random (global torch RNG), so that every image can be seen whatever ``length`` is.

    ``images``: PIL images, or a dataset whose items are ``(PIL image, label)`` (an ImageFolder; labels unused).
    """

    def __init__(self, images: Sequence[Image.Image] | Dataset, length: int, transform: Callable) -> None:
        if len(images) == 0:  # type: ignore[arg-type]
            raise DataError("no images to pretrain on")
        if length <= 0:
            raise ValueError(f"crops per epoch must be a positive integer, got {length}")
        self.images, self.length, self.transform = images, length, transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        n = len(self.images)  # type: ignore[arg-type]
        pick = index % n if n <= self.length else int(torch.randint(0, n, ()).item())
        item = self.images[pick]  # type: ignore[index]
        img = item[0] if isinstance(item, tuple) else item
        return self.transform(img), 0


def build_pretrain_dataset(
    data: str | Path | None,
    img_size: int,
    length: int,
    mean: Sequence[float],
    std: Sequence[float],
    verify: bool = True,
) -> RandomCrops:
    """Random crops of the sample photographs (``data=None``), of an embedded set's training split (its name,
    e.g. ``"scenes"``; labels unused, validation images never seen) or of an ImageFolder tree (its ``train/``
    sub-folder when there is one; class sub-folders are required, their names are ignored)."""

    transform = crop_transform(img_size, mean, std)
    if data is None:
        return RandomCrops(load_sample_photos(), length, transform)
    if is_embedded(data):
        train, _ = build_embedded(str(data), img_size, None, None)
        return RandomCrops(train, length, embedded_crop_transform(img_size, mean, std))
    root = Path(data)
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if (root / "train").is_dir():
        root = root / "train"
    return RandomCrops(FolderDataset(root, transform=None, verify=verify), length, transform)
