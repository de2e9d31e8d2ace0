"""Datasets (embedded default, ImageFolder) and transforms."""

from pdevision.data.datasets import (
    DataError,
    DigitsDataset,
    FolderDataset,
    FolderScan,
    build_datasets,
    scan_folder,
    stratified_split,
)
from pdevision.data.imageio import IMAGE_EXTENSIONS, ImageReadError, open_rgb, to_rgb
from pdevision.data.transforms import RECIPES, Recipe, build_transforms, eval_transform_for

__all__ = [
    "IMAGE_EXTENSIONS",
    "RECIPES",
    "DataError",
    "DigitsDataset",
    "FolderDataset",
    "FolderScan",
    "ImageReadError",
    "Recipe",
    "build_datasets",
    "build_transforms",
    "eval_transform_for",
    "open_rgb",
    "scan_folder",
    "stratified_split",
    "to_rgb",
]
