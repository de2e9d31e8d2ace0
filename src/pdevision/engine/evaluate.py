"""Evaluating a checkpoint on a data set, and predicting labels for image files."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import confusion_matrix

from pdevision.data import IMAGE_EXTENSIONS, ImageReadError, build_datasets, eval_transform_for, open_rgb
from pdevision.data.embedded import embedded_data_of
from pdevision.engine.checkpoint import CheckpointError, read_meta, resolve_checkpoint
from pdevision.engine.modeling import load_into_model, model_from_meta
from pdevision.engine.runtime import resolve_device
from pdevision.engine.train import evaluate_model

log = logging.getLogger(__name__)


def _model_from_checkpoint(checkpoint: str | Path, model_name: str | None, device: torch.device):
    folder = resolve_checkpoint(checkpoint)
    meta = read_meta(folder)
    classes = meta.get("classes")
    if not classes:
        task = meta.get("task")
        if task in ("denoise", "dejpeg"):
            raise CheckpointError(f"checkpoint {folder} is a {task} model; restore images with `pdevision restore`")
        if meta.get("kind") == "pretrain" or task == "pretrain":
            encoder = folder.parent / "encoder"
            raise CheckpointError(f"checkpoint {folder} is a pretraining checkpoint; evaluate {encoder}")
        raise CheckpointError(f"checkpoint {folder} does not list its classes (a bare encoder?); it needs a classifier")
    name = model_name or meta.get("model") or ""
    model = model_from_meta(meta, len(classes), name or None)
    load_into_model(model, folder, name, classes)
    return model.to(device).eval(), meta, folder


def default_eval_output(folder: str | Path) -> Path:
    """Where evaluation results of the checkpoint ``folder`` go by default: beside it, never inside it
    (the next save of ``RUN/best/`` replaces that folder whole): ``RUN/eval-best/`` for ``RUN/best/``."""
    folder = Path(folder)
    name = folder.name
    if name.startswith(".") and name.endswith(".old"):  # the fallback of an interrupted save
        name = name[1:-4]
    return folder.parent / f"eval-{name}"


def expand_images(images: list[str | Path]) -> list[Path]:
    """Image paths: files as given, folders replaced by their image files (sorted, not recursive)."""
    out: list[Path] = []
    for item in images:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(IMAGE_EXTENSIONS))
            if not found:
                raise FileNotFoundError(f"folder {path} holds no image files ({', '.join(IMAGE_EXTENSIONS)})")
            out.extend(found)
        else:
            out.append(path)
    return out


def _plot_confusion(matrix: np.ndarray, classes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.4 * len(classes) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    if len(classes) <= 30:
        ax.set_xticks(range(len(classes)), classes, rotation=90)
        ax.set_yticks(range(len(classes)), classes)
        for i in range(len(classes)):
            for j in range(len(classes)):
                if matrix[i, j]:
                    ax.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def evaluate_checkpoint(
    checkpoint: str | Path,
    model_name: str | None = None,
    data: str | None = None,
    batch_size: int = 64,
    output: str | Path | None = None,
    device: str = "auto",
    val_split: float = 0.2,
) -> dict[str, Any]:
    """Top-1/top-5, per-class accuracy, confusion matrix (PNG in ``output``) and images/s of a
    checkpoint on the validation split of ``data`` (the embedded digits when ``None``)."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    dev = resolve_device(device)
    model, meta, folder = _model_from_checkpoint(checkpoint, model_name, dev)
    classes = list(meta["classes"])
    val_tf = eval_transform_for(meta)
    data = data if data is not None else embedded_data_of(meta)
    _, val_set = build_datasets(data, int(meta["img_size"]), val_split, val_tf, val_tf)
    if list(val_set.classes) != classes:
        raise CheckpointError(
            f"checkpoint {folder} was trained for classes {classes[:10]} ({len(classes)}), "
            f"the data has {list(val_set.classes)[:10]} ({len(val_set.classes)})"
        )
    # warm-up pass so images/s reflects steady state
    with torch.no_grad():
        model(torch.stack([val_set[0][0]]).to(dev))
    result = evaluate_model(model, val_set, batch_size, dev)
    preds, targets = result.pop("preds").numpy(), result.pop("targets").numpy()
    matrix = confusion_matrix(targets, preds, labels=list(range(len(classes))))
    per_class = {
        c: (100.0 * matrix[i, i] / matrix[i].sum() if matrix[i].sum() else None) for i, c in enumerate(classes)
    }
    result.update(per_class_top1=per_class, checkpoint=str(folder), model=meta.get("model"), classes=classes)
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        _plot_confusion(matrix, classes, out / "confusion_matrix.png")
        (out / "eval.json").write_text(json.dumps({**result, "confusion_matrix": matrix.tolist()}, indent=2))
        result["confusion_png"] = str(out / "confusion_matrix.png")
    return result


@torch.no_grad()
def predict_images(
    checkpoint: str | Path,
    images: list[str | Path],
    topk: int = 5,
    device: str = "auto",
    errors: str = "raise",
) -> list[dict[str, Any]]:
    """Top-``topk`` class names with probabilities for each image file (folders: each image in them).
    An image that cannot be read raises :class:`~pdevision.data.ImageReadError` (``errors="raise"``) or
    gets an entry ``{"image": path, "error": reason}`` (``errors="report"``) and the others go on."""
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', got {errors!r}")
    if topk <= 0:
        raise ValueError(f"topk must be a positive integer, got {topk}")
    paths = expand_images(images)
    dev = resolve_device(device)
    model, meta, _ = _model_from_checkpoint(checkpoint, None, dev)
    classes = list(meta["classes"])
    tf = eval_transform_for(meta)
    results: list[dict[str, Any]] = []
    for path in paths:
        try:
            x = tf(open_rgb(path)).unsqueeze(0).to(dev)
        except ImageReadError as exc:
            if errors == "raise":
                raise
            results.append({"image": str(path), "error": str(exc)})
            continue
        probs = model(x).float().softmax(-1)[0]
        k = min(topk, len(classes))
        top = probs.topk(k)
        results.append(
            {
                "image": str(path),
                "top": [(classes[i], float(p)) for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)],
            }
        )
    return results
