"""Evaluating an encoder checkpoint without training: k-nearest-neighbour accuracy of its pooled features."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from pdevision.data import build_datasets, eval_transform_for
from pdevision.engine.checkpoint import resolve
from pdevision.engine.modeling import load_checkpoint_model, model_from_meta
from pdevision.engine.runtime import resolve_device

log = logging.getLogger(__name__)


def encoder_from_meta(meta: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    """The backbone (no classifier) an encoder checkpoint's metadata describes (weights not loaded)."""
    return model_from_meta(meta, num_classes=0)


def load_encoder(
    checkpoint: str | Path, device: torch.device | str = "cpu", meta: dict[str, Any] | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """The backbone (no classifier) stored in an encoder checkpoint written by ``pdevision pretrain`` (``meta``: its
    metadata where it was read already), and its metadata."""
    model, meta, _ = load_checkpoint_model(checkpoint, ("encoder",), encoder_from_meta, meta=meta)
    return model.to(device), meta


@torch.no_grad()
def embed(
    model: nn.Module, dataset: Dataset, batch_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pooled, L2-normalised features ``(N, C)`` (``forward_head(pre_logits=True)``) and labels ``(N,)``."""
    feats, labels = [], []
    for images, target in DataLoader(dataset, batch_size=batch_size):
        x = model.forward_head(model.forward_features(images.to(device)), pre_logits=True)
        feats.append(F.normalize(x.float().flatten(1), dim=1).cpu())
        labels.append(torch.as_tensor(target))
    return torch.cat(feats), torch.cat(labels)


def knn_predict(
    train_feats: torch.Tensor, train_labels: torch.Tensor, feats: torch.Tensor, k: int, temperature: float = 0.07
) -> torch.Tensor:
    """Weighted k-NN vote (cosine similarity, weights ``exp(sim / temperature)``, as in DINO's k-NN protocol)."""
    k = min(k, train_feats.shape[0])
    num_classes = int(train_labels.max()) + 1
    sim, idx = (feats @ train_feats.T).topk(k, dim=1)
    votes = torch.zeros(feats.shape[0], num_classes)
    votes.scatter_add_(1, train_labels[idx], (sim / temperature).exp())
    return votes.argmax(1)


def knn_evaluate(
    checkpoint: str | Path,
    data: str | None = None,
    k: int = 20,
    batch_size: int = 64,
    device: str = "auto",
    val_split: float = 0.2,
    output: str | Path | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """k-NN top-1 (%) of an encoder's frozen features on the validation split of ``data`` (default: the embedded
    digits), with the training split as the memory bank; both at the encoder's image size, eval transforms.
    ``meta``: the checkpoint's metadata where it was read already."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    dev = resolve_device(device)
    model, meta = load_encoder(checkpoint, dev, meta)
    img_size = int(meta["img_size"])
    tf = eval_transform_for(meta)
    train_set, val_set = build_datasets(data, img_size, val_split, tf, tf)
    train_feats, train_labels = embed(model, train_set, batch_size, dev)
    feats, labels = embed(model, val_set, batch_size, dev)
    preds = knn_predict(train_feats, train_labels, feats, k)
    result = {
        "checkpoint": str(resolve(checkpoint)),
        "model": meta["model"],
        "method": meta.get("method"),
        "k": k,
        "knn_top1": 100.0 * float((preds == labels).float().mean()),
        "train_images": len(train_set),
        "images": len(val_set),
    }
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "knn.json").write_text(json.dumps(result, indent=2))
    return result
