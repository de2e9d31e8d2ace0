"""Building models by name and loading checkpoints into them, with clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from pdevision.engine.checkpoint import CheckpointError, load_weights, read_meta
from pdevision.models.factory import ModelNameError, build_model

__all__ = ["ModelNameError", "build_model", "check_image_size", "load_into_model", "min_input_size", "model_from_meta"]


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
    missing, unexpected = model.load_state_dict(state, strict=not reset_head)
    if reset_head:
        missing = [k for k in missing if not k.startswith(tuple(f"{h}." for h in head_keys))]
        if missing or unexpected:
            raise CheckpointError(f"checkpoint {checkpoint} does not fit {model_name}: missing {missing[:5]}")
    return meta


def model_from_meta(meta: dict[str, Any], num_classes: int, name: str | None = None) -> nn.Module:
    """The model a checkpoint's metadata describes (name, arguments, image size), with ``num_classes``
    outputs (0 for a bare encoder); training-only arguments such as drop path are left out."""
    name = name or meta.get("model")
    if not name:
        raise CheckpointError("the checkpoint does not name its model; pass --model")
    args = dict(meta.get("model_args", {}))
    img_size = args.pop("img_size", meta.get("img_size"))
    args.pop("drop_path_rate", None)
    return build_model(name, num_classes=num_classes, img_size=img_size, **args)
