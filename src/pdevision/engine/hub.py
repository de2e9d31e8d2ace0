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

import inspect
import json
from pathlib import Path
from typing import Any

import timm
from torch import nn

from pdevision._files import is_run_folder, not_a_regular_file
from pdevision.engine.metadata import MetadataError, parse_json

__all__ = ["HUB_CONFIG", "hub_config", "hub_config_bytes", "model_card"]

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
    if "img_size" not in inspect.signature(type(model).__init__).parameters:
        args.pop("img_size", None)  # the factory drops it for a model that takes none: timm would pass it on
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


def _run_record(folder: Path, name: str) -> dict[str, Any]:
    """``folder/name`` parsed by the bounded JSON reader, or ``{}`` when it is missing or unreadable."""
    file = folder / name
    if not file.is_file() or not_a_regular_file(file) is not None:
        return {}
    try:
        value = parse_json(file.read_text())
    except (OSError, UnicodeDecodeError, MetadataError):
        return {}
    return value if isinstance(value, dict) else {}


def _scalar(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else _card_text(str(value), limit=1000)


def _card_text(text: str, limit: int = 80) -> str:
    """``text`` as one line of the model card: characters that are not printable (newlines, controls) escaped as
    Python writes them, cut at ``limit`` characters."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def model_card(meta: dict[str, Any], checkpoint: Path, name: str | None = None) -> str:
    """The ``README.md`` of a hub export: what the model is, how to load it (``pip install pdevision`` and ``import
    pdevision`` before ``timm.create_model``: the architecture is registered by pdevision), and, for a checkpoint of a
    run, its data and metrics from the run's ``config.json`` and ``summary.json``."""
    model = name or str(meta.get("model"))
    classes = meta.get("classes") or []
    run = checkpoint.parent if is_run_folder(checkpoint.parent) else None
    config, summary = (_run_record(run, "config.json"), _run_record(run, "summary.json")) if run else ({}, {})
    trained = bool(run and summary)
    what = f"{len(classes)}-class image classifier" if classes else "image model"
    lines = [
        "---",
        "library_name: timm",
        "license: apache-2.0",
        "tags:",
        *(f"- {t}" for t in ("image-classification", "timm", "pdevision", "trained" if trained else "exported")),
        "---",
        "",
        f"# {model}",
        "",
        f"A {what} ({model}, {meta.get('img_size')} px), exported from a pdevision checkpoint by `pdevision export "
        "--format hub`.",
    ]
    if classes:
        shown = ", ".join(_card_text(str(c)) for c in classes[:20]) + (", ..." if len(classes) > 20 else "")
        lines += ["", f"Classes: {shown}."]
    lines += [
        "",
        "## How to load",
        "",
        "The architecture is pdevision's: install it, and import it before timm builds the model.",
        "",
        "```bash",
        "pip install pdevision",
        "```",
        "",
        "```python",
        "import pdevision  # registers pdevision's models with timm",
        "import timm",
        "",
        'model = timm.create_model("local-dir:PATH/TO/THIS/FOLDER", pretrained=True).eval()  # or "hf-hub:USER/REPO"',
        "```",
    ]
    if trained:
        lines += ["", "## Training data and metrics", ""]
        for key in ("data", "task", "epochs", "img_size", "batch_size", "lr"):
            if isinstance(config.get(key), (str, int, float)) and not isinstance(config.get(key), bool):
                lines.append(f"- {key}: {_scalar(config[key])}")
        best = summary.get("best_row") if isinstance(summary.get("best_row"), dict) else {}
        if isinstance(summary.get("best_metric"), str):
            lines.append(f"- best {_card_text(summary['best_metric'])}: {_scalar(summary.get('best'))}")
        lines += [
            f"- {_card_text(k)} (best epoch): {_scalar(v)}" for k, v in best.items() if isinstance(v, (int, float, str))
        ]
    return "\n".join(lines) + "\n"
