"""Helpers shared by the model families: input validation and feature-map sizes."""

from __future__ import annotations

import math

import torch


def to_2tuple_size(size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``224 -> (224, 224)``; a pair is returned as a tuple of ints."""
    if isinstance(size, int):
        return size, size
    if len(size) != 2:
        raise ValueError(f"an image size is an int or a (height, width) pair, got {size!r}")
    return int(size[0]), int(size[1])


def conv_out_size(size: int, times: int) -> int:
    """Spatial size after ``times`` 3x3 stride-2 convolutions with padding 1 (``ceil`` halving)."""
    for _ in range(times):
        size = math.ceil(size / 2)
    return size


def check_image_batch(x: torch.Tensor, in_chans: int, min_size: int) -> None:
    """Raise ``ValueError`` naming expected and actual shape unless ``x`` is ``(B, in_chans, H, W)``
    with ``H, W >= min_size``."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"expected a torch.Tensor of shape (batch, {in_chans}, height, width), got {type(x)}")
    if x.ndim != 4:
        raise ValueError(
            f"expected a 4-D tensor of shape (batch, {in_chans}, height, width), got {x.ndim}-D shape {tuple(x.shape)}"
        )
    if x.shape[1] != in_chans:
        raise ValueError(
            f"expected {in_chans} input channels, shape (batch, {in_chans}, height, width), "
            f"got {x.shape[1]} channels in shape {tuple(x.shape)}"
        )
    if x.shape[2] < min_size or x.shape[3] < min_size:
        raise ValueError(
            f"expected height and width of at least {min_size} (the network's total stride), "
            f"got {x.shape[2]}x{x.shape[3]} in shape {tuple(x.shape)}"
        )
