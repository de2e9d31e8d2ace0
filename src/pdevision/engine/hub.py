"""timm's ``config.json`` for a checkpoint folder, so that the folder is also a timm / Hugging Face model folder.

``RUN/best/config.json`` (beside ``model.safetensors``) holds what ``timm.create_model("local-dir:RUN/best")`` and the
Hub read: ``architecture``, ``num_classes``, ``num_features``, ``label_names``, ``model_args`` and the
``pretrained_cfg`` (mean, std, input size, crop, interpolation). The run's own settings stay in ``RUN/config.json``
one level up, and pdevision's metadata stays in the safetensors header: the two files never meet.

Written for backbone checkpoints that timm can rebuild (a registered timm model; classification and encoder
checkpoints); a segmentation, detection, restoration or pretraining checkpoint holds a model timm cannot build
and gets none. The file names no path and no download source: loading it never touches the network.
"""

from __future__ import annotations

import json
from typing import Any

import timm
from torch import nn

__all__ = ["HUB_CONFIG", "hub_config", "hub_config_bytes"]

HUB_CONFIG = "config.json"

# the pretrained-cfg fields that describe the weights' source (a URL, a hub id, a file): dropped, a shared folder is
# its own source
_SOURCE_FIELDS = ("tag", "url", "hf_hub_id", "hf_hub_filename", "file", "state_dict", "source", "custom_load")
# the crop and interpolation of pdevision's evaluation transform (the ``light`` recipe)
EVAL_CROP_PCT = 1.0
EVAL_INTERPOLATION = "bicubic"


def hub_config(model: nn.Module, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The timm ``config.json`` of a checkpoint of ``model`` with pdevision metadata ``meta``, or ``None`` when timm
    could not rebuild the model from it (not a registered timm model, or a task's whole model)."""
    name = meta.get("model")
    if not isinstance(name, str) or not timm.is_model(name) or meta.get("kind") not in (None, "classify", "encoder"):
        return None
    base = getattr(model, "pretrained_cfg", None)
    if not isinstance(base, dict) or not hasattr(model, "num_classes"):
        return None
    args = {k: v for k, v in (meta.get("model_args") or {}).items() if k != "drop_path_rate"}
    in_chans = int(args.get("in_chans", 3))
    size = meta.get("img_size") or args.get("img_size") or base.get("input_size", (3, 224, 224))[-1]
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    cfg = {k: v for k, v in base.items() if k not in _SOURCE_FIELDS and v is not None}
    cfg.update(
        architecture=name,
        num_classes=int(model.num_classes),
        input_size=(in_chans, int(height), int(width)),
        mean=tuple(meta.get("mean") or base.get("mean")),
        std=tuple(meta.get("std") or base.get("std")),
        crop_pct=EVAL_CROP_PCT,
        interpolation=EVAL_INTERPOLATION,
    )
    if (height, width) != tuple(base.get("input_size", (0, 0, 0))[1:]):
        cfg.pop("pool_size", None)
    config: dict[str, Any] = {
        "architecture": cfg.pop("architecture"),
        "num_classes": int(model.num_classes),
        "num_features": int(getattr(model, "num_features", 0)),
    }
    classes = meta.get("classes")
    if classes and model.num_classes == len(classes):
        config["label_names"] = list(classes)
    if args:
        config["model_args"] = args
    config["pretrained_cfg"] = cfg
    return config


def hub_config_bytes(model: nn.Module, meta: dict[str, Any]) -> bytes | None:
    """:func:`hub_config` as the bytes of ``config.json``, or ``None``."""
    config = hub_config(model, meta)
    return None if config is None else (json.dumps(config, indent=2) + "\n").encode()
