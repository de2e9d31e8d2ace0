"""Creating any registered model (this library's or timm's) by name, with clear errors."""

from __future__ import annotations

import difflib
from typing import Any

import timm
from timm.utils.model import reparameterize_model
from torch import nn


class ModelNameError(ValueError):
    """An unknown model name."""


class ModelArgumentError(TypeError, ValueError):
    """An argument the model's constructor does not take: a ``TypeError`` as Python raises it, and a ``ValueError``
    so that the command line reports it as bad input (one line, exit 2)."""


def build_model(name: str, num_classes: int | None = None, img_size: int | None = None, **kwargs: Any) -> nn.Module:
    """``timm.create_model`` for this library's models and timm's; passes ``img_size`` where the
    model takes it (it sets vHeat's FVE size, Swin's and DeiT's grids), and suggests close names
    for an unknown one."""
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (see `pdevision models` or timm.list_models())"
        raise ModelNameError(f"unknown model {name!r}{hint}")
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if img_size is not None:
        try:
            return timm.create_model(name, img_size=img_size, **kwargs)
        except TypeError as exc:
            if "img_size" not in str(exc):
                raise ModelArgumentError(f"{name} does not take the arguments {sorted(kwargs)}: {exc}") from exc
    try:
        return timm.create_model(name, **kwargs)
    except TypeError as exc:  # e.g. --model-args '{"depth": 1}' for a model that takes "depths"
        raise ModelArgumentError(f"{name} does not take the arguments {sorted(kwargs)}: {exc}") from exc


def min_input_size(model: nn.Module) -> int:
    """Smallest height/width the model accepts: its ``min_input_size`` or its largest feature stride."""
    size = getattr(model, "min_input_size", None)
    if size:
        return int(size)
    info = getattr(model, "feature_info", None)
    if info:
        try:
            return int(max(f["reduction"] for f in info))
        except (TypeError, KeyError):
            pass
    return 1


def check_image_size(model: nn.Module, img_size: int) -> None:
    if img_size < min_input_size(model):
        raise ValueError(
            f"image size {img_size} is below the model's minimum of {min_input_size(model)} (its total stride)"
        )


def fold_for_inference(
    model: nn.Module, img_size: int | tuple[int, int] | None = None, inplace: bool = False
) -> nn.Module:
    """timm's ``reparameterize_model`` (re-parameterisable blocks fused), then, for models whose
    folding depends on the input size (vHeat's decay factors), a fold at ``img_size``."""
    model = reparameterize_model(model, inplace=inplace)
    if img_size is not None and hasattr(model, "reparameterize"):
        try:
            model.reparameterize(img_size=img_size)
        except TypeError:  # a model whose reparameterize() takes no size
            pass
    return model
