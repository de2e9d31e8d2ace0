"""Building models by name and loading checkpoints into them, with clear errors.

A checkpoint's metadata is untrusted input: :func:`model_from_meta` passes on only model constructor
arguments. Arguments that make timm fetch or read weights (``pretrained``, ``pretrained_cfg*``,
``checkpoint_path``, ``cache_dir``, anything naming a URL, hub or file) and string values that look
like a URL or a path are refused with :class:`CheckpointError`; the model is always built with
``pretrained=False``, and the remaining names must be parameters of the model class's constructor.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from torch import nn

from pdevision.engine.checkpoint import CheckpointError, load_weights, read_meta
from pdevision.models.factory import ModelNameError, build_model, check_image_size, min_input_size

__all__ = [
    "ModelNameError",
    "build_model",
    "check_image_size",
    "check_model_args",
    "load_into_model",
    "min_input_size",
    "model_from_meta",
]


def load_into_model(
    model: nn.Module, checkpoint: str | Path, model_name: str, classes: list[str] | None, reset_head: bool = False
) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` after checking it was trained for the same model
    and classes; ``reset_head`` keeps the model's own (new) classifier instead."""
    meta = read_meta(checkpoint)
    if meta.get("model") and meta["model"] != model_name:
        raise CheckpointError(
            f"checkpoint {checkpoint} holds a {meta['model']!r} model, not {model_name!r} (use --model {meta['model']})"
        )
    state = load_weights(checkpoint)
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    head_keys = {f"{n}" for n, m in model.named_modules() if m is head}
    if reset_head:
        prefixes = tuple(f"{k}." for k in head_keys)
        state = {k: v for k, v in state.items() if not k.startswith(prefixes)}
    elif classes is not None and meta.get("classes") is not None and list(meta["classes"]) != list(classes):
        raise CheckpointError(
            f"checkpoint {checkpoint} was trained for {len(meta['classes'])} classes {meta['classes'][:10]}, "
            f"the data has {len(classes)} {classes[:10]}; pass --reset-head to fine-tune with a new classifier"
        )
    own = model.state_dict()
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    if mismatched:
        raise CheckpointError(f"checkpoint {checkpoint} does not fit {model_name}: shapes differ for {mismatched[:5]}")
    if any(k.endswith("k_exp") for k in state) and hasattr(model, "reparameterize"):
        model.reparameterize()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if reset_head:
        missing = [k for k in missing if not k.startswith(tuple(f"{h}." for h in head_keys))]
    if missing or unexpected:  # counted, with the first few: a whole list can run to thousands of names
        raise CheckpointError(
            f"checkpoint {checkpoint} does not fit {model_name}: {len(missing)} weights missing {missing[:5]}, "
            f"{len(unexpected)} unexpected {unexpected[:5]}"
        )
    return meta


_REFUSED_KEYS = re.compile(r"pretrain|checkpoint|path|url|uri|file|hub|cache|download|feature_cfg|_cls$", re.I)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SIMPLE = (bool, int, float, type(None))


def _check_value(key: str, value: Any, depth: int = 0) -> None:
    if isinstance(value, _SIMPLE):
        return
    if isinstance(value, str):
        if len(value) > 64 or re.search(r"://|[/\\:~]|^hf[-_]hub|\.\.", value):
            raise CheckpointError(
                f"model argument {key}={value!r} in the checkpoint looks like a URL or file reference; refused"
            )
        return
    if isinstance(value, (list, tuple)) and depth < 2 and len(value) <= 64:
        for item in value:
            _check_value(key, item, depth + 1)
        return
    raise CheckpointError(f"model argument {key} in the checkpoint has a value of type {type(value).__name__}; refused")


def check_model_args(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` read from a checkpoint, after refusing anything but plain constructor arguments."""
    if not isinstance(args, dict):
        raise CheckpointError(f"model arguments in the checkpoint must be a JSON object, not {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise CheckpointError(f"model argument name {key!r} in the checkpoint is not an identifier; refused")
        if _REFUSED_KEYS.search(key.replace("drop_path", "")):
            raise CheckpointError(
                f"model argument {key!r} in the checkpoint could make the library download or read other weights; "
                "refused (checkpoints may only carry constructor arguments such as depths or widths)"
            )
        _check_value(key, value)
    return args


def _unknown_constructor_args(model: nn.Module, names: list[str]) -> list[str]:
    params = inspect.signature(type(model).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []  # the class passes extra arguments on: timm's builder has checked them already
    return [n for n in names if n not in params]


def model_from_meta(meta: dict[str, Any], num_classes: int, name: str | None = None) -> nn.Module:
    """The model a checkpoint's metadata describes (name, arguments, image size), with ``num_classes``
    outputs (0 for a bare encoder); training-only arguments such as drop path are left out. Arguments are
    checked by :func:`check_model_args`; the model is never built with pretrained weights."""
    name = name or meta.get("model")
    if not name:
        raise CheckpointError("the checkpoint does not name its model; pass --model")
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        raise CheckpointError(f"model name {name!r} is not a registered model name (no hub or file references)")
    args = dict(check_model_args(meta.get("model_args", {})))
    img_size = args.pop("img_size", meta.get("img_size"))
    if img_size is not None:
        sizes = img_size if isinstance(img_size, (list, tuple)) else [img_size]
        if not sizes or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 16384 for v in sizes):
            raise CheckpointError(f"image size {img_size!r} in the checkpoint is not an integer from 1 to 16384")
    args.pop("drop_path_rate", None)
    try:
        model = build_model(name, num_classes=num_classes, img_size=img_size, pretrained=False, **args)
    except TypeError as exc:  # an argument the model's constructor does not take
        raise CheckpointError(
            f"model arguments {sorted(args)} in the checkpoint do not fit {name} ({' '.join(str(exc).split())}); "
            "refused"
        ) from exc
    unknown = _unknown_constructor_args(model, list(args))
    if unknown:
        raise CheckpointError(f"model arguments {unknown} in the checkpoint are not arguments of {name}; refused")
    return model
