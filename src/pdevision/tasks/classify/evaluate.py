"""Classification: evaluating a model or a checkpoint on a data set (predicting labels for image files:
:mod:`pdevision.tasks.classify.predict`)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from timm.utils import accuracy
from torch import nn
from torch.utils.data import DataLoader, Dataset

from pdevision._optional import install_hint, installed, require
from pdevision.data import build_datasets, eval_transform_for
from pdevision.data.embedded import embedded_classes, embedded_data_of, is_embedded
from pdevision.engine.checkpoint import CheckpointError, label_names
from pdevision.engine.distributed import DistInfo, all_reduce_sum
from pdevision.engine.modeling import load_classifier
from pdevision.engine.resume import recorded_data
from pdevision.engine.runtime import autocast, resolve_device
from pdevision.errors import UsageError

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    dataset: Dataset,
    batch_size: int,
    device: torch.device,
    info: DistInfo = DistInfo(),  # noqa: B008
    amp: str = "none",
    workers: int = 0,
) -> dict[str, Any]:
    """Loss, top-1 and top-5 accuracy (timm's ``accuracy``) over ``dataset`` (sharded across ranks, sums
    reduced), with predictions and targets of this rank for per-class statistics, and images/s."""
    model.eval()
    if isinstance(dataset, torch.utils.data.IterableDataset):
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    else:
        indices = range(info.rank, len(dataset), info.world_size)
        loader = DataLoader(torch.utils.data.Subset(dataset, indices), batch_size=batch_size, num_workers=workers)
    loss_sum, top1, top5, n = 0.0, 0.0, 0.0, 0.0
    preds, targets = [], []
    start = time.perf_counter()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        with autocast(device, amp):
            logits = model(images)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        acc1, acc5 = accuracy(logits, labels, topk=(1, min(5, logits.shape[1])))
        top1 += acc1.item() * labels.numel() / 100.0
        top5 += acc5.item() * labels.numel() / 100.0
        n += labels.numel()
        preds.append(logits.argmax(1).cpu())
        targets.append(labels.cpu())
    elapsed = time.perf_counter() - start
    loss_sum, top1, top5, n, elapsed = all_reduce_sum([loss_sum, top1, top5, n, elapsed], info, device)
    n = max(n, 1.0)
    return {
        "loss": loss_sum / n,
        "top1": 100.0 * top1 / n,
        "top5": 100.0 * top5 / n,
        "images": int(n),
        "images_per_s": n / max(elapsed / info.world_size, 1e-9),
        "preds": torch.cat(preds) if preds else torch.empty(0, dtype=torch.long),
        "targets": torch.cat(targets) if targets else torch.empty(0, dtype=torch.long),
    }


def display_label(name: str) -> str:
    """A class name as text any font and terminal can show: a folder name that is not UTF-8 (Python keeps its bytes
    as lone surrogates, which matplotlib and UTF-8 streams refuse) gets those bytes as ``\\xNN`` escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def confusion_matrix(targets: np.ndarray, preds: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts of (true class, predicted class): row ``i`` holds the images of class ``i`` by their prediction
    (scikit-learn's ``confusion_matrix`` layout, computed with NumPy so evaluation needs no scikit-learn)."""
    targets, preds = np.asarray(targets, dtype=np.int64), np.asarray(preds, dtype=np.int64)
    if targets.shape != preds.shape:
        raise ValueError(f"targets {targets.shape} and predictions {preds.shape} differ in shape")
    inside = (targets >= 0) & (targets < num_classes) & (preds >= 0) & (preds < num_classes)
    flat = np.bincount(targets[inside] * num_classes + preds[inside], minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes)


def _plot_confusion(matrix: np.ndarray, classes: list[str], path: Path) -> None:
    matplotlib = require("matplotlib", "train")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.5, 0.4 * len(classes) + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.0, size), layout="constrained")
    im = ax.imshow(matrix, cmap="Blues")
    bar = fig.colorbar(im, ax=ax, shrink=0.8)
    bar.set_label("images", fontsize=9)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    classes = [display_label(c) for c in classes]
    if len(classes) <= 30:
        short = [c if len(c) <= 14 else c[:13] + "\N{HORIZONTAL ELLIPSIS}" for c in classes]
        long = max(map(len, short)) > 3
        ax.set_xticks(range(len(classes)), short, rotation=90 if long else 0)
        ax.set_yticks(range(len(classes)), short)
        ax.tick_params(labelsize=9)
        dark = matrix.max() / 2
        for i in range(len(classes)):
            for j in range(len(classes)):
                if matrix[i, j]:
                    colour = "white" if matrix[i, j] > dark else "black"
                    ax.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=8, color=colour)
    else:  # class indices: whole numbers only
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _data_classes(folder: Path, meta: dict[str, Any], data_classes: list[str]) -> list[str]:
    """The classes of a checkpoint evaluated on data of ``data_classes``: its own, which must be the data's (a foreign
    file that names none: the data's, when the counts agree)."""
    classes = list(meta["classes"]) if meta.get("classes") else label_names(meta)
    if not meta.get("classes") and len(data_classes) == len(classes):  # a foreign file names no classes
        log.info("%s names no classes; its %d outputs are read as the data's classes", folder, len(classes))
        classes = data_classes
    if data_classes != classes:
        raise CheckpointError(
            f"checkpoint {folder} was trained for classes {classes[:10]} ({len(classes)}), "
            f"the data has {data_classes[:10]} ({len(data_classes)})"
        )
    return classes


def evaluate_checkpoint(
    checkpoint: str | Path,
    model_name: str | None = None,
    data: str | None = None,
    batch_size: int = 64,
    output: str | Path | None = None,
    device: str = "auto",
    val_split: float = 0.2,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Top-1/top-5, per-class accuracy, confusion matrix (PNG in ``output``) and images/s of a
    checkpoint on the validation split of ``data`` (the embedded digits when ``None``). ``meta``: the checkpoint's
    metadata where it was read already (:func:`~pdevision.engine.modeling.load_checkpoint_model`)."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    dev = resolve_device(device)
    model, meta, folder = load_classifier(checkpoint, dev, fused_kernels=True, meta=meta)
    if model_name is not None and model_name != meta.get("model"):
        raise CheckpointError(f"checkpoint {folder} holds a {meta.get('model')!r} model, not {model_name!r}")
    val_tf = eval_transform_for(meta)
    data, val_split = run_data(folder, meta, data, val_split)
    known = embedded_classes(data)
    if known is not None:  # before the set is drawn: minutes for Pathfinder
        _data_classes(folder, meta, known)
    _, val_set = build_datasets(data, int(meta["img_size"]), val_split, val_tf, val_tf)
    classes = _data_classes(folder, meta, list(val_set.classes))
    # warm-up pass so images/s reflects steady state
    with torch.no_grad():
        model(torch.stack([val_set[0][0]]).to(dev))
    result = evaluate_model(model, val_set, batch_size, dev)
    preds, targets = result.pop("preds").numpy(), result.pop("targets").numpy()
    matrix = confusion_matrix(targets, preds, len(classes))
    per_class = {
        c: (100.0 * matrix[i, i] / matrix[i].sum() if matrix[i].sum() else None) for i, c in enumerate(classes)
    }
    result.update(per_class_top1=per_class, checkpoint=str(folder), model=meta.get("model"), classes=classes)
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.json").write_text(json.dumps({**result, "confusion_matrix": matrix.tolist()}, indent=2))
        result["eval_json"] = str(out / "eval.json")
        if installed("matplotlib"):
            _plot_confusion(matrix, classes, out / "confusion_matrix.png")
            result["confusion_png"] = str(out / "confusion_matrix.png")
        else:
            log.warning(
                "confusion_matrix.png not drawn (the matrix is in eval.json): %s", install_hint("matplotlib", "train")
            )
    return result


def run_data(folder: Path, meta: dict[str, Any], data: str | None, val_split: float) -> tuple[str | None, float]:
    """The data (and validation fraction) to evaluate the checkpoint ``folder`` on: ``data`` where given, else the
    folder its run trained on (``RUN/config.json``, with the run's split, so no training image is evaluated), else
    the embedded set its metadata names (``None``: the digits)."""
    if data is not None:
        return data, val_split
    recorded = recorded_data(folder, "classify")
    if recorded is not None and not is_embedded(recorded[0]):
        if not Path(recorded[0]).exists():
            raise UsageError(
                f"{folder.parent / 'config.json'} records the run's data {recorded[0]}, which is not here; "
                "name the data with --data"
            )
        log.info("the run's data: %s (validation fraction %g; --data names other data)", *recorded)
        return recorded
    return embedded_data_of(meta), val_split
