"""timm's ``config.json`` for a checkpoint folder, so that the folder is also a timm / Hugging Face model folder,
and for a run folder, so that ``timm.create_model("local-dir:RUN")`` loads the run's best weights.

``RUN/best/config.json`` (beside ``model.safetensors``) holds what ``timm.create_model("local-dir:RUN/best")`` and the
Hub read: ``architecture``, ``num_classes``, ``num_features``, ``label_names``, ``model_args`` and the
``pretrained_cfg`` (mean, std, input size, crop, interpolation). pdevision's metadata stays in the safetensors header.

``RUN/config.json`` holds the run's settings and the same timm keys beside them (:func:`run_config`); timm reads only
its own keys, and the readers of the settings (``--resume``, ``--config``) only the settings (:func:`run_settings`).
One name means two things there: timm's ``model_args`` (the arguments that rebuild the model, with its image size)
and the ``--model-args`` the run was given, which the file records as :data:`GIVEN_MODEL_ARGS`. The weights are
``RUN/best.safetensors``, a relative link to ``best/model.safetensors`` (:func:`pdevision.engine.save.link_best`)
that timm finds as the folder's one ``.safetensors`` file; not ``RUN/model.safetensors``, which would make every
reader take the run folder for a checkpoint folder.

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

__all__ = [
    "GIVEN_MODEL_ARGS",
    "HUB_CONFIG",
    "TIMM_KEYS",
    "TIMM_KINDS",
    "hub_config",
    "hub_config_bytes",
    "model_card",
    "run_config",
    "run_settings",
]

HUB_CONFIG = "config.json"
# the checkpoint kinds whose model timm can rebuild (a backbone): a task's whole model is not one
TIMM_KINDS = (None, "classify", "encoder")
# the keys of timm's config.json (hub_config); in RUN/config.json, beside the run's settings
TIMM_KEYS = ("architecture", "num_classes", "num_features", "label_names", "model_args", "pretrained_cfg")
# the run's --model-args in a RUN/config.json that holds timm's keys, whose model_args is timm's
GIVEN_MODEL_ARGS = "given_model_args"

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
    if not isinstance(name, str) or not timm.is_model(name) or meta.get("kind") not in TIMM_KINDS:
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


def run_config(settings: dict[str, Any], timm_config: dict[str, Any] | None) -> dict[str, Any]:
    """``RUN/config.json``: the run's ``settings`` and, where timm can rebuild the run's model (``timm_config`` of
    :func:`hub_config`, else ``None``: the settings alone), timm's keys after them, the settings' ``model_args``
    renamed :data:`GIVEN_MODEL_ARGS` in its place. :func:`run_settings` gives ``settings`` back."""
    if timm_config is None:
        return dict(settings)
    out = {(GIVEN_MODEL_ARGS if key == "model_args" else key): value for key, value in settings.items()}
    clash = sorted(set(out) & set(timm_config))
    if clash:  # a task's setting of a timm key's name: the two would overwrite each other
        raise ValueError(f"the run's settings {clash} have the names of timm's config.json keys")
    return {**out, **timm_config}


def run_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """The run's settings in a ``RUN/config.json`` (:func:`run_config`): timm's keys left out, the run's
    ``--model-args`` back under its name. A file without timm's keys (another task's run, an older run) is all
    settings."""
    if not {"architecture", "pretrained_cfg"} <= set(recorded):  # what timm needs of a config.json
        return dict(recorded)
    return {
        ("model_args" if key == GIVEN_MODEL_ARGS else key): value
        for key, value in recorded.items()
        if key not in TIMM_KEYS
    }


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
    pdevision`` before ``timm.create_model`` or transformers: the architecture is registered by pdevision), and, for a
    checkpoint of a run, its data and metrics from the run's ``config.json`` and ``summary.json``. Tagged ``trained``
    where the checkpoint is a training run's (a run's summary, or a training epoch in its metadata), else
    ``exported``: nothing says how a checkpoint from elsewhere was made."""
    model = name or str(meta.get("model"))
    classes = meta.get("classes") or []
    run = checkpoint.parent if is_run_folder(checkpoint.parent) else None
    config, summary = (_run_record(run, "config.json"), _run_record(run, "summary.json")) if run else ({}, {})
    epoch = meta.get("epoch") if isinstance(meta.get("epoch"), int) and not isinstance(meta.get("epoch"), bool) else 0
    trained = bool(summary) or epoch > 0
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
        "The architecture is pdevision's: install it, and import it before timm (or transformers) builds the model.",
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
        "",
        "With transformers (its timm wrapper builds the same model):",
        "",
        "```python",
        "import pdevision  # registers pdevision's models with timm, which transformers calls",
        "from transformers import pipeline",
        "",
        'classify = pipeline("image-classification", model="PATH/TO/THIS/FOLDER")',
        "```",
    ]
    if trained:
        lines += ["", "## Training data and metrics", ""]
        data = config.get("data") or meta.get("data")  # a run on an embedded set records its name in the checkpoint
        if isinstance(data, str):
            lines.append(f"- data: {data}")
        for key in ("task", "epochs", "img_size", "batch_size", "lr"):
            if isinstance(config.get(key), (str, int, float)) and not isinstance(config.get(key), bool):
                lines.append(f"- {key}: {_scalar(config[key])}")
        if epoch > 0:
            lines.append(f"- this checkpoint: {checkpoint.name}, after epoch {epoch}")
        best = summary.get("best_row") if isinstance(summary.get("best_row"), dict) else {}
        if isinstance(summary.get("best_metric"), str):
            lines.append(f"- best {_card_text(summary['best_metric'])}: {_scalar(summary.get('best'))}")
        lines += [
            f"- {_card_text(k)} (best epoch): {_scalar(v)}"
            for k, v in best.items()
            if isinstance(v, (int, float, str)) and (k == "epoch" or k.startswith("val_"))
        ]
    return "\n".join(lines) + "\n"
