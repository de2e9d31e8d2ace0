"""The library's fixed stratified train/val split, shared by the digits, the scenes and ImageFolder trees."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pdevision._optional import require
from pdevision.data.errors import DataError

__all__ = ["stratified_split"]


def stratified_split(targets: Sequence[int], val_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices of a fixed stratified train/val split (scikit-learn's ``train_test_split``)."""
    train_test_split = require("sklearn.model_selection", "train").train_test_split  # slow to import: on use

    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"the validation fraction must be between 0 and 1, got {val_fraction}")
    counts = np.bincount(np.asarray(targets))
    if len(targets) and counts[counts > 0].min() < 2:
        rare = [int(c) for c in np.flatnonzero((counts > 0) & (counts < 2))]
        raise DataError(f"cannot split classes with a single image into train and val (class indices {rare})")
    idx = np.arange(len(targets))
    train, val = train_test_split(idx, test_size=val_fraction, stratify=np.asarray(targets), random_state=seed)
    return sorted(train.tolist()), sorted(val.tolist())
