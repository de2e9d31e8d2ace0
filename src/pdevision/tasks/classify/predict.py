"""Classification: the labels a checkpoint predicts for image files, batch by batch.

Images are read by the library's one reader and made the checkpoint's input by its evaluation transform (timm's
resize and centre crop, so an image of any size fits), in a :class:`~torch.utils.data.DataLoader` (with ``workers``
processes decoding the next batches while the model runs on this one). Results come in the order of the files
(:func:`~pdevision.data.listing.list_images`), one per image, as each batch is done. An image that cannot be read
is an entry with its ``error``; the others go on. An image inside an ImageFolder tree (``val/<class>/x.png``) whose
folder names one of the checkpoint's classes carries its ``true`` class, and the predictions count the top-1 hits.
Class names that are ImageNet synsets (``n01440764``, as a 1000-class checkpoint without names of its own has them)
are shown as timm's ImageNet descriptions (``tench, Tinca tinca``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import timm.data
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from pdevision.data import ImageReadError, eval_transform_for, open_rgb
from pdevision.data.listing import ListedImage, list_images
from pdevision.engine.checkpoint import label_names
from pdevision.engine.modeling import load_classifier
from pdevision.engine.runtime import resolve_device
from pdevision.tasks.classify.evaluate import display_label

log = logging.getLogger(__name__)

__all__ = ["Predictions", "iter_predictions", "predict_images", "shown_names"]


def shown_names(names: Sequence[str]) -> list[str]:
    """The class names as printed: ImageNet synsets (every name one of timm's ``ImageNetInfo``) as their
    descriptions, the synset added where two descriptions are alike (``crane (n03126707)``); any other names as
    :func:`~pdevision.tasks.classify.evaluate.display_label` shows them."""
    info = timm.data.ImageNetInfo()
    synsets = set(info.label_names())
    if not names or not all(isinstance(n, str) and n in synsets for n in names):
        return [display_label(n) for n in names]
    described = [info.label_name_to_description(n) for n in names]
    twice = {d for d, count in Counter(described).items() if count > 1}
    return [f"{d} ({n})" if d in twice else d for d, n in zip(described, names, strict=True)]


class _Images(Dataset):
    """The listed images as model inputs: ``(index, tensor, None)``, or ``(index, None, reason)`` for an image that
    cannot be read."""

    def __init__(self, images: Sequence[ListedImage], transform: Any) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, str | None]:
        try:
            return index, self.transform(open_rgb(self.images[index].path)), None
        except ImageReadError as exc:
            return index, None, str(exc)


def _collate(items: list[tuple[int, torch.Tensor | None, str | None]]) -> tuple[list[int], torch.Tensor | None, dict]:
    """A batch: the indices of the images read, their tensors stacked, and the reasons of those that were not."""
    read = [(i, x) for i, x, _ in items if x is not None]
    failed = {i: reason for i, x, reason in items if x is None}
    return [i for i, _ in read], (torch.stack([x for _, x in read]) if read else None), failed


class Predictions:
    """The predictions of a classification checkpoint for image files, computed batch by batch while they are
    iterated (each a dict: ``image``, and ``top``, a list of ``(class, probability)``, or ``error``; ``true``
    where the image's folder names a class). ``len()`` is the number of images; after the iteration ``failed``,
    ``labelled`` and ``correct`` count the unreadable images, those with a ``true`` class and their top-1 hits.
    Made by :func:`iter_predictions`."""

    def __init__(
        self,
        model: nn.Module,
        meta: dict[str, Any],
        images: list[ListedImage],
        topk: int,
        device: torch.device,
        batch_size: int,
        workers: int,
        errors: str,
    ) -> None:
        self.model, self.meta, self.images, self.device = model, meta, images, device
        self.topk, self.batch_size, self.workers, self.errors = topk, batch_size, workers, errors
        names = label_names(meta)
        self.classes = shown_names(names)
        self._index = {n: i for i, n in enumerate(names)}
        self.failed = self.labelled = self.correct = 0

    def __len__(self) -> int:
        return len(self.images)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.failed = self.labelled = self.correct = 0
        data = _Images(self.images, eval_transform_for(self.meta))
        workers = self.workers if len(data) > self.batch_size else 0  # one batch: nothing to overlap with
        loader = DataLoader(
            data,
            batch_size=self.batch_size,
            num_workers=workers,
            collate_fn=_collate,
            pin_memory=self.device.type == "cuda",
        )
        k = min(self.topk, len(self.classes))
        for read, x, failed in loader:
            top: dict[int, tuple[list[float], list[int]]] = {}
            if x is not None:
                with torch.no_grad():
                    probs = self.model(x.to(self.device, non_blocking=True)).float().softmax(-1)
                values, indices = probs.topk(k)
                top = dict(zip(read, zip(values.tolist(), indices.tolist(), strict=True), strict=True))
            for i in sorted([*read, *failed]):
                yield self._result(i, top.get(i), failed.get(i))

    def _result(self, i: int, top: tuple[list[float], list[int]] | None, error: str | None) -> dict[str, Any]:
        image = self.images[i]
        if top is None:
            if self.errors == "raise":
                raise ImageReadError(error)
            self.failed += 1
            return {"image": str(image.path), "error": error}
        values, indices = top
        result: dict[str, Any] = {
            "image": str(image.path),
            "top": [(self.classes[c], p) for p, c in zip(values, indices, strict=True)],
        }
        true = self._index.get(image.folder) if image.folder is not None else None
        if true is not None:
            result["true"] = self.classes[true]
            self.labelled += 1
            self.correct += int(indices[0] == true)
        return result


def iter_predictions(
    checkpoint: str | Path,
    images: Iterable[str | Path | ListedImage],
    topk: int = 5,
    device: str = "auto",
    batch_size: int = 32,
    errors: str = "raise",
    meta: dict[str, Any] | None = None,
    workers: int = 0,
) -> Predictions:
    """The predictions of ``checkpoint`` for ``images`` (files; folders: every image in them and in their
    sub-folders), computed as they are iterated, ``batch_size`` images at a time (``workers`` processes decode
    the next batches). The images are listed and the checkpoint loaded here (a missing checkpoint or a folder without
    images raises now); an image that cannot be read raises :class:`~pdevision.data.ImageReadError` when its result
    is reached (``errors="raise"``) or is an entry ``{"image": path, "error": reason}`` (``errors="report"``).
    ``meta``: the checkpoint's metadata where it was read already."""
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', got {errors!r}")
    for name, value, low in (("topk", topk, 1), ("batch_size", batch_size, 1), ("workers", workers, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")
    listed = list_images(images)
    dev = resolve_device(device)
    model, meta, _ = load_classifier(checkpoint, dev, fused_kernels=True, meta=meta)
    return Predictions(model, meta, listed, topk, dev, batch_size, workers, errors)


def predict_images(
    checkpoint: str | Path,
    images: Iterable[str | Path | ListedImage],
    topk: int = 5,
    device: str = "auto",
    errors: str = "raise",
    meta: dict[str, Any] | None = None,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Top-``topk`` class names with probabilities for each image file (folders: each image in them), as a list:
    :func:`iter_predictions` run to its end."""
    return list(iter_predictions(checkpoint, images, topk, device, batch_size, errors, meta))
