"""Datasets (embedded default, ImageFolder), the one image reader of every task, and transforms."""

from pdevision.data.datasets import FolderDataset, FolderScan, build_datasets, scan_folder
from pdevision.data.digits import DigitsDataset
from pdevision.data.errors import DataError
from pdevision.data.imageio import (
    IMAGE_EXTENSIONS,
    ImageReadError,
    NativeImage,
    decode_rgb,
    open_rgb,
    read_image_native,
    read_rgb_array,
    to_rgb,
)
from pdevision.data.splits import stratified_split
from pdevision.data.transforms import RECIPES, Recipe, build_transforms, eval_transform_for

__all__ = [
    "IMAGE_EXTENSIONS",
    "RECIPES",
    "DataError",
    "DigitsDataset",
    "FolderDataset",
    "FolderScan",
    "ImageReadError",
    "NativeImage",
    "Recipe",
    "build_datasets",
    "build_transforms",
    "decode_rgb",
    "eval_transform_for",
    "open_rgb",
    "read_image_native",
    "read_rgb_array",
    "scan_folder",
    "stratified_split",
    "to_rgb",
]
