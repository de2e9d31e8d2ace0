"""Datasets (embedded default, ImageFolder) and transforms."""

from pdevision.data.datasets import (
    DataError,
    DigitsDataset,
    FolderDataset,
    build_datasets,
    scan_folder,
    stratified_split,
)
from pdevision.data.transforms import RECIPES, Recipe, build_transforms, eval_transform_for

__all__ = [
    "RECIPES",
    "DataError",
    "DigitsDataset",
    "FolderDataset",
    "Recipe",
    "build_datasets",
    "build_transforms",
    "eval_transform_for",
    "scan_folder",
    "stratified_split",
]
