"""Creating any registered model (this library's or timm's) by name, with clear errors."""

from __future__ import annotations

import difflib
import re
from typing import Any

import timm
from timm.utils.model import reparameterize_model
from torch import nn

from pdevision.models.restoration import is_restoration_model


class ModelNameError(ValueError):
    """An unknown model name."""


class ModelArgumentError(TypeError, ValueError):
    """An argument the model's constructor does not take: a ``TypeError`` as Python raises it, and a ``ValueError``
    so that the command line reports it as bad input (one line, exit 2)."""


class UnsafeModelArgumentError(ModelArgumentError):
    """A model argument that would make the library fetch or read weights, or build an absurd size."""


_REFUSED_KEYS = re.compile(r"pretrain|checkpoint|path|url|uri|file|hub|cache|download|feature_cfg|_cls$", re.I)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SIMPLE = (bool, int, float, type(None))
MAX_INT_ARGUMENT = 16384  # widths, sizes: beyond this the allocation runs out of memory before anything useful
MAX_COUNT_ARGUMENT = 1024  # depths, heads, layers, blocks per entry
_COUNT_KEYS = re.compile(r"depth|layers|blocks|heads|repeat", re.I)


def _check_value(key: str, value: Any, source: str, depth: int = 0) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        limit = MAX_COUNT_ARGUMENT if _COUNT_KEYS.search(key) else MAX_INT_ARGUMENT
        if abs(value) > limit:
            raise UnsafeModelArgumentError(f"model argument {key}={value} {source} is above {limit}; refused")
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnsafeModelArgumentError(f"model argument {key}={value} {source} is not finite; refused")
        return
    if isinstance(value, str):
        if len(value) > 64 or re.search(r"://|[/\\:~]|^hf[-_]hub|\.\.", value):
            raise UnsafeModelArgumentError(
                f"model argument {key}={value!r} {source} looks like a URL or file reference; refused"
            )
        return
    if isinstance(value, (list, tuple)) and depth < 2 and len(value) <= 64:
        for item in value:
            _check_value(key, item, source, depth + 1)
        return
    raise UnsafeModelArgumentError(f"model argument {key} {source} has a value of type {type(value).__name__}; refused")


def check_model_args(args: Any, source: str = "given") -> dict[str, Any]:
    """``args`` after refusing anything but plain constructor arguments: no name that makes timm fetch or read
    weights (``pretrained``, ``pretrained_cfg*``, ``checkpoint_path``, ...), no string that looks like a URL or a
    path, integers bounded (depths, heads, layers at most :data:`MAX_COUNT_ARGUMENT` each, other integers at most
    :data:`MAX_INT_ARGUMENT`). ``source`` says where they came from in the message (``"in the checkpoint"``)."""
    if not isinstance(args, dict):
        raise UnsafeModelArgumentError(f"model arguments {source} must be a JSON object, not {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UnsafeModelArgumentError(f"model argument name {key!r} {source} is not an identifier; refused")
        if _REFUSED_KEYS.search(key.replace("drop_path", "")) and not (key == "pretrained" and value is False):
            raise UnsafeModelArgumentError(
                f"model argument {key!r} {source} could make the library download or read other weights; refused "
                "(model arguments may only be constructor arguments such as depths or widths; load local weights "
                "with timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...)))"
            )
        _check_value(key, value, source)
    return args


def check_model_name(name: Any, source: str = "given") -> str:
    """``name`` if it is a plain registered-model name (no ``hf-hub:`` / ``local-dir:`` reference, no path)."""
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        raise ModelNameError(f"model name {name!r} {source} is not a registered model name (no hub or file references)")
    return name


def build_model(name: str, num_classes: int | None = None, img_size: int | None = None, **kwargs: Any) -> nn.Module:
    """``timm.create_model`` for this library's models and timm's, never with pretrained weights: passes
    ``img_size`` where the model takes it (it sets vHeat's FVE size, Swin's and DeiT's grids), suggests close names
    for an unknown one, and refuses arguments that fetch or read weights or ask for absurd sizes
    (:func:`check_model_args`). Local weights load through ``timm.create_model`` (see docs/using.md)."""
    check_model_name(name)
    check_model_args(kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k != "pretrained"}
    if not timm.is_model(name):
        if is_restoration_model(name):
            raise ModelNameError(
                f"{name!r} is a restoration model (image to image, not a classifier or backbone): train it with "
                "`pdevision train --task denoise` (or `--task dejpeg`), build it with "
                "pdevision.models.restoration.build_restoration_model"
            )
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
