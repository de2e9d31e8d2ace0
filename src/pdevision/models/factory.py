"""Creating any registered model (this library's or timm's) by name, with clear errors."""

from __future__ import annotations

import difflib
import re
from typing import Any

import timm
from timm.utils.model import reparameterize_model
from torch import nn

from pdevision.errors import UsageError
from pdevision.models._arguments import (
    MAX_COUNT_ARGUMENT,
    MAX_PARAMETERS,
    MAX_SIZE,
    MAX_STEP_ARGUMENT,
    RATE_EXPECTED,
    ModelArgumentError,
    ModelNameError,
    UnsafeModelArgumentError,
    check_model_args,
    check_model_name,
    check_model_size,
    check_model_values,
    check_rate,
    valid_image_size,
)
from pdevision.models.restoration import is_restoration_model

LARGE_INPUT = 1024  # above this side, create_model counts the parameters first (vHeat's FVEs grow with the input)


def create_model(
    name: str, num_classes: int | None = None, img_size: int | tuple[int, int] | None = None, **kwargs: Any
) -> nn.Module:
    """``timm.create_model`` for this library's models and timm's, never with pretrained weights: passes
    ``img_size`` where the model takes it (it sets vHeat's FVE size, Swin's and DeiT's grids), suggests close names
    for an unknown one, and refuses arguments that fetch or read weights or ask for absurd sizes
    (:func:`check_model_args`; with an input above :data:`LARGE_INPUT` or together, more than
    :data:`MAX_PARAMETERS` parameters: :func:`check_model_size`).
    Local weights load through ``timm.create_model`` (see docs/using.md)."""
    check_model_name(name)
    check_model_args(kwargs)
    if img_size is not None and not valid_image_size(img_size):
        raise ModelArgumentError(
            f"img_size={img_size!r:.80} must be an integer from 1 to {MAX_SIZE}, or a pair (height, width) of them"
        )
    kwargs = {k: v for k, v in kwargs.items() if k != "pretrained"}
    if not timm.is_model(name):
        if is_restoration_model(name):
            raise ModelNameError(
                f"{name!r} is a restoration model (image to image, not a classifier or backbone): train it with "
                "`pdevision train --task denoise` (or `--task dejpeg`), build it with "
                "pdevision.models.restoration.create_restoration_model"
            )
        close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (see `pdevision models` or timm.list_models())"
        raise ModelNameError(f"unknown model {name!r}{hint}")
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
        check_model_values({"num_classes": num_classes})
    shown = {k: v for k, v in kwargs.items() if k != "num_classes"}
    side = max(img_size) if isinstance(img_size, (tuple, list)) else img_size  # (height, width) or one side
    if side is not None and side > LARGE_INPUT:
        shown["img_size"] = img_size
    if shown:  # a registered configuration at a usual size needs no check
        check_model_size(lambda: _create(name, kwargs, img_size), name, shown)
    try:
        return _create(name, kwargs, img_size)
    except (AssertionError, AttributeError, IndexError, KeyError, RuntimeError, ZeroDivisionError) as exc:  # missed
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        listed = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        raise ModelArgumentError(f"{name} cannot be built with {listed:.160} ({type(exc).__name__}: {text})") from exc


_UNEXPECTED = re.compile(r"unexpected keyword argument(?:\(s\))?:?\s*(.*)")


def _not_taken(name: str, kwargs: dict[str, Any], exc: TypeError) -> ModelArgumentError:
    """The error for arguments ``name``'s constructor does not take: only those it refused are named (Python's
    "unexpected keyword argument 'x'", timm's "unexpected keyword argument(s): ['x', 'y']"), with the mixer where
    one was chosen (an option of another mixer)."""
    text = " ".join(str(exc).split())
    found = _UNEXPECTED.search(text)
    refused = sorted(set(re.findall(r"'([A-Za-z_][A-Za-z0-9_]*)'", found.group(1)))) if found else []
    refused = [k for k in refused if k in kwargs] or sorted(kwargs)
    mixer = f" with mixer={kwargs['mixer']!r}" if isinstance(kwargs.get("mixer"), str) else ""
    return ModelArgumentError(f"{name}{mixer} does not take the arguments {refused} ({text})")


def _create(name: str, kwargs: dict[str, Any], img_size: int | None) -> nn.Module:
    if img_size is not None:
        try:
            return timm.create_model(name, img_size=img_size, **kwargs)
        except ModelArgumentError:  # the constructor's own check (a TypeError too): it names the argument
            raise
        except TypeError as exc:
            if "img_size" not in str(exc):
                raise _not_taken(name, kwargs, exc) from exc
    try:
        return timm.create_model(name, **kwargs)
    except ModelArgumentError:
        raise
    except TypeError as exc:  # e.g. --model-args '{"depth": 1}' for a model that takes "depths"
        raise _not_taken(name, kwargs, exc) from exc


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
    """A :class:`~pdevision.errors.UsageError` for an image size below the model's total stride."""
    if img_size < min_input_size(model):
        raise UsageError(
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


__all__ = [
    "LARGE_INPUT",
    "MAX_COUNT_ARGUMENT",
    "MAX_PARAMETERS",
    "MAX_SIZE",
    "MAX_STEP_ARGUMENT",
    "RATE_EXPECTED",
    "ModelArgumentError",
    "ModelNameError",
    "UnsafeModelArgumentError",
    "check_image_size",
    "check_model_args",
    "check_model_name",
    "check_model_size",
    "check_rate",
    "create_model",
    "fold_for_inference",
    "min_input_size",
]
