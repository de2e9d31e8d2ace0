"""The embedded default: scikit-learn's bundled handwritten digits as a classification set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from pdevision._optional import require
from pdevision.data.errors import DataError
from pdevision.data.splits import stratified_split

__all__ = ["DIGITS_MAX_SIZE", "DigitsDataset"]

# the 8x8 scans upsampled 128 times: beyond this nothing is gained, and the library's own resize of each image
# would pass Pillow's decompression-bomb guard at 16384 px (an internal error instead of a refusal)
DIGITS_MAX_SIZE = 1024


class DigitsDataset(Dataset):
    """scikit-learn's bundled handwritten digits (1,797 real 8x8 scans, 10 classes) as RGB images.

    The 8x8 images (0..16) are scaled to 0..255 and upsampled bicubically to ``img_size`` (64 by
    default, so a stride-32 backbone still has a 2x2 last map). ``split`` is ``"train"`` (80%),
    ``"val"`` (20%, stratified, fixed seed) or ``"all"``.
    """

    def __init__(self, split: str = "train", img_size: int = 64, transform: Callable | None = None) -> None:
        load_digits = require("sklearn.datasets", "data").load_digits  # slow to import: only when the set is built

        if split not in ("train", "val", "all"):
            raise DataError(f"digits split must be 'train', 'val' or 'all', got {split!r}")
        self.check_size(img_size)
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

    @staticmethod
    def check_size(img_size: int) -> None:
        """Refuse (:class:`DataError`) a size the 8x8 scans cannot use sensibly."""
        if not 1 <= int(img_size) <= DIGITS_MAX_SIZE:
            raise DataError(
                f"image size {img_size} is more than the embedded digits (8x8 scans) can use: "
                f"at most {DIGITS_MAX_SIZE} px; give a smaller --img-size"
            )

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = Image.fromarray(self.images[index]).resize((self.img_size, self.img_size), Image.BICUBIC)
        img = img.convert("RGB")
        return (self.transform(img) if self.transform else img), self.targets[index]
