"""Evaluating a checkpoint on a data set, and predicting labels for image files."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from pdevision.data import build_datasets, eval_transform_for
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
        raise CheckpointError(f"checkpoint {folder} does not list its classes")
    name = model_name or meta.get("model") or ""
    model = model_from_meta(meta, len(classes), name or None)
    load_into_model(model, folder, name, classes)
    return model.to(device).eval(), meta, folder


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
    matrix = np.zeros((len(classes), len(classes)), dtype=np.int64)
    np.add.at(matrix, (targets, preds), 1)
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
    checkpoint: str | Path, images: list[str | Path], topk: int = 5, device: str = "auto"
) -> list[dict[str, Any]]:
    """Top-``topk`` class names with probabilities for each image file."""
    dev = resolve_device(device)
    model, meta, _ = _model_from_checkpoint(checkpoint, None, dev)
    classes = list(meta["classes"])
    tf = eval_transform_for(meta)
    results = []
    for path in images:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"image {path} does not exist")
        try:
            with Image.open(path) as img:
                x = tf(img.convert("RGB")).unsqueeze(0).to(dev)
        except OSError as exc:
            raise ValueError(f"cannot read image {path}: {exc}") from exc
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
