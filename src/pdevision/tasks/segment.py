"""Semantic segmentation as a task of the one loop: ``pdevision train --task segment``.

Model: a backbone (``--model``) under an smp decoder (``--head upernet|fpn|unet``,
:func:`pdevision.models.dense.create_segmentation_model`); data: the embedded scenes or a mask folder
(:mod:`pdevision.data.dense`); loss: cross-entropy with 255 ignored; metrics: mIoU, mean class accuracy
and pixel accuracy from a confusion matrix summed over ranks; ``best/`` is the highest val mIoU.

Recipes (AdamW; the schedule is the loop's, warm-up then cosine):

* ``light`` (default, this library's): from scratch on the embedded scenes on a CPU; lr 3e-3 at
  batch 8, weight decay 0.05, 1 warm-up epoch, 8 epochs, decoder width 64, random resize 0.9-1.25, crop,
  flip, no photometric distortion (the scenes' digit colours are random already). With no ``--data``,
  ``--epochs`` or ``--time-budget`` the run is :data:`EMBEDDED_EPOCHS` epochs of the embedded scenes
  (segmentation 15, detection 3: a fixed number of steps whose CPU time was measured, README).
* ``upernet_swin``: the fine-tuning recipe Swin Transformer used for UPerNet on ADE20K (Liu et al.
  2021, arXiv:2103.14030, §4.3: AdamW, lr 6e-5, weight decay 0.01, batch 16, 160k iterations, linear
  warm-up 1,500 iterations, linear decay), which the HcNet paper (§4.3) and the vHeat authors' UPerNet
  configs follow; here the decay is the loop's cosine and warm-up is counted in epochs (one), decoder
  width 512 (mmseg's UPerNet channels).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import nn
from torch.utils.data import Dataset
from torchvision.utils import draw_segmentation_masks

from pdevision._optional import require_all
from pdevision._values import is_int
from pdevision.data.dense import IGNORE_INDEX, build_dense_datasets, check_scene_img_size
from pdevision.engine.loop import fit
from pdevision.models.dense import create_segmentation_model
from pdevision.models.factory import MAX_SIZE
from pdevision.tasks.dense import (
    DenseCommands,
    DenseConfig,
    DenseRecipe,
    DenseTask,
    backbone_weights,
    check_backbone_checkpoint,
    model_kwargs,
    plain_tensors,
    predict_files,
    report_predictions,
    write_predictions,
)
from pdevision.tasks.registry import checkpoint_meta, register

log = logging.getLogger(__name__)

# optional packages (module, extra) that training and evaluation need: checked before a run starts
REQUIRES = (("segmentation_models_pytorch", "dense"), ("matplotlib", "train"))


SEGMENT_RECIPES = {
    "light": DenseRecipe(
        lr=3e-3,
        batch=8,
        weight_decay=0.05,
        epochs=8,
        warmup_epochs=1.0,
        min_lr=1e-5,
        decoder_channels=64,
        source="this library's CPU recipe (from scratch)",
        scale_range=(0.9, 1.25),
        photometric=False,
    ),
    "upernet_swin": DenseRecipe(
        lr=6e-5,
        batch=16,
        weight_decay=0.01,
        epochs=12,
        warmup_epochs=1.0,
        min_lr=0.0,
        decoder_channels=512,
        source="Swin arXiv:2103.14030 §4.3 (UPerNet, ADE20K), HcNet §4.3, vHeat",
    ),
}


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``(num_classes, num_classes)`` counts, rows the true class, columns the prediction; pixels whose
    target is outside ``0..num_classes-1`` (255) are left out."""
    keep = (target >= 0) & (target < num_classes)
    idx = target[keep].long() * num_classes + pred[keep].long()
    return torch.bincount(idx, minlength=num_classes**2).reshape(num_classes, num_classes)


def segmentation_scores(conf: np.ndarray | torch.Tensor) -> dict[str, Any]:
    """mIoU, mean class accuracy and pixel accuracy (percent) of a confusion matrix, as mmseg reduces
    it: per-class IoU ``TP / (TP + FP + FN)`` averaged over the classes present in the labels or the
    predictions (a class absent from both has no IoU)."""
    conf = np.asarray(conf, dtype=np.float64)
    tp = np.diag(conf)
    gt, pred = conf.sum(1), conf.sum(0)
    union = gt + pred - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, tp / union, np.nan)
        acc = np.where(gt > 0, tp / gt, np.nan)
    total = conf.sum()
    return {
        "miou": float(np.nanmean(iou) * 100) if np.isfinite(iou).any() else 0.0,
        "macc": float(np.nanmean(acc) * 100) if np.isfinite(acc).any() else 0.0,
        "pixel_acc": float(tp.sum() / total * 100) if total else 0.0,
        "iou": [None if np.isnan(v) else float(v * 100) for v in iou],
    }


class SegmentTask(DenseTask):
    """Semantic segmentation from a :class:`DenseConfig`."""

    name = "segment"
    noun = "segmentation"
    best_metric = "miou"
    higher_is_better = True

    def __init__(self, config: DenseConfig) -> None:
        if config.recipe not in SEGMENT_RECIPES:
            raise ValueError(f"segmentation recipe must be one of {', '.join(SEGMENT_RECIPES)}, got {config.recipe!r}")
        self.config = config
        self.recipe = SEGMENT_RECIPES[config.recipe]
        self.head = config.head or "upernet"
        self.img_size = config.img_size or 64
        if config.data is None:
            check_scene_img_size(self.img_size)
        self.kwargs = model_kwargs(config, self.img_size)
        if config.init_from:
            check_backbone_checkpoint(config.init_from, config.model)
        self.last_iou: list[float | None] = []

    def datasets(self) -> tuple[Dataset, Dataset]:
        c = self.config
        data = build_dense_datasets(
            "segment",
            c.data,
            self.img_size,
            c.scene_seed,
            64,
            c.train_scenes,
            c.val_scenes,
            self.recipe.scale_range,
            photometric=self.recipe.photometric,
        )
        return self._take_data(data)

    def create_model(self) -> nn.Module:
        return create_segmentation_model(
            self.config.model,
            len(self.classes),
            head=self.head,
            checkpoint=backbone_weights(self.config.init_from),
            decoder_channels=self.recipe.decoder_channels,
            **self.kwargs,
        )

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        images, masks = plain_tensors(batch)
        logits = model(images)
        loss = F.cross_entropy(logits.float(), masks, ignore_index=IGNORE_INDEX)
        valid = masks != IGNORE_INDEX
        acc = (logits.argmax(1)[valid] == masks[valid]).float().mean().item() * 100.0
        return loss, {"pixel_acc": acc}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, ctx: Any) -> dict[str, float]:
        model.eval()
        n = len(self.classes)
        conf = torch.zeros(n, n, dtype=torch.long, device=ctx.device)
        loss_sum, pixels = 0.0, 0
        for batch in ctx.loader(self.val_set, batch_size=min(ctx.batch_size, 16)):
            images, masks = ctx.to_device(plain_tensors(batch))
            with ctx.autocast():
                logits = model(images)
            loss_sum += F.cross_entropy(logits.float(), masks, ignore_index=IGNORE_INDEX, reduction="sum").item()
            pixels += int((masks != IGNORE_INDEX).sum())
            conf += confusion_matrix(logits.argmax(1), masks, n)
        flat = ctx.sum([*conf.flatten().tolist(), loss_sum, pixels])
        scores = segmentation_scores(np.asarray(flat[: n * n]).reshape(n, n))
        self.last_iou = scores.pop("iou")
        return {"loss": flat[-2] / max(flat[-1], 1), **scores}

    def checkpoint_meta(self) -> dict[str, Any]:
        return self._meta(
            decoder_channels=self.recipe.decoder_channels,
            mean=list(IMAGENET_DEFAULT_MEAN),
            std=list(IMAGENET_DEFAULT_STD),
        )

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        best = run.get("best")
        out = self._summary(best_val_miou=float(best) if best is not None else -1.0)
        out["val_iou_per_class"] = dict(zip(self.classes, self.last_iou, strict=False))
        return out

    def epoch_log(self, row: dict[str, Any]) -> str:
        return (
            f"train loss {row.get('train_loss', float('nan')):.4f}  val loss {row.get('val_loss', float('nan')):.4f} "
            f"mIoU {row.get('val_miou', float('nan')):.2f}% pixel acc {row.get('val_pixel_acc', float('nan')):.2f}%"
        )


def train(config: DenseConfig) -> dict[str, Any]:
    """Train a segmentation model as ``config`` says through the one loop; returns the run summary."""
    require_all(REQUIRES)
    return fit(SegmentTask(config), config.run)


# the least side an image is predicted at: the decoders' GroupNorm needs more than one value at the deepest stride
# (32) and refused a 20 x 30 image; a smaller image is padded with the mean colour and its class map cropped back
PREDICT_MIN_SIDE = 64


def segmenter_from_meta(meta: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    """The segmentation model a segment checkpoint's metadata describes (weights not loaded)."""
    channels = meta.get("decoder_channels")
    if not (is_int(channels) and 0 < channels <= MAX_SIZE):
        # a huge width asked the allocator for terabytes (a RuntimeError, exit 1)
        raise ValueError(f"decoder_channels {channels!r:.40} is not an integer from 1 to {MAX_SIZE}")
    return create_segmentation_model(
        meta["model"], len(meta["classes"]), head=meta["head"], decoder_channels=meta["decoder_channels"], **args
    )


def predict_segment(
    checkpoint: str | Path,
    images: list[str],
    output: str | Path,
    device: str = "cpu",
    meta: dict[str, Any] | None = None,
) -> dict:
    """Class maps of image files at their own size: ``<stem>_overlay.png`` (classes coloured), ``<stem>_labels.png``
    (the class index per pixel) and ``predictions.json`` (a list of ``{image, size, label_png, pixels per class}``).
    Returns ``{"kind", "results", "output"}``. ``meta``: the checkpoint's metadata where it was read already."""

    def one(model, uint8, meta, colours, dev, index, path, out, stem):
        overlay, found = _segment_image(model, uint8, meta, colours, dev, out / f"{stem}_labels.png")
        return overlay, {**found, "image": str(path)}

    _, results, failed = predict_files(checkpoint, "segment", segmenter_from_meta, one, images, output, device, meta)
    write_predictions(output, results)
    return {"kind": "segment", "results": results, "failed": failed, "output": str(output)}


def _segment_image(
    model: nn.Module, uint8: torch.Tensor, meta: dict[str, Any], colours: list, dev: torch.device, label_png: Path
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Class map of one ``(3, H, W)`` uint8 image, written to ``label_png``; the overlay and the image's record. A
    side below :data:`PREDICT_MIN_SIDE` is padded (bottom, right) for the model and cropped from its output."""
    classes = list(meta["classes"])
    mean = torch.tensor(meta["mean"])[:, None, None]
    std = torch.tensor(meta["std"])[:, None, None]
    h, w = uint8.shape[1:]
    x = (uint8.float().div(255.0) - mean) / std  # the mean colour is 0: the padding's value
    x = F.pad(x, (0, max(0, PREDICT_MIN_SIDE - w), 0, max(0, PREDICT_MIN_SIDE - h)))
    labels = model(x[None].to(dev))[0, :, :h, :w].argmax(0).cpu()
    Image.fromarray(labels.numpy().astype(np.uint8)).save(label_png)
    shown = [c for c in labels.unique().tolist() if classes[c] != "background"]
    overlay = uint8.clone()  # nothing but background: the image itself (torchvision warns on no mask)
    if shown:
        masks = torch.stack([labels == c for c in shown])
        overlay = draw_segmentation_masks(uint8, masks, alpha=0.5, colors=[colours[c] for c in shown])
    counts = torch.bincount(labels.flatten(), minlength=len(classes)).tolist()
    record = {
        "size": [int(uint8.shape[1]), int(uint8.shape[2])],
        "label_png": label_png.name,
        "pixels": {classes[c]: n for c, n in enumerate(counts) if n},
    }
    return overlay, record


class SegmentCommands(DenseCommands):
    name = "segment"
    requires = REQUIRES
    help = "semantic segmentation (default: vheat_micro + UPerNet on the embedded scenes)"
    default_output = "runs/segment"
    noun = "segmentation"
    recipes = SEGMENT_RECIPES
    heads = ("upernet", "fpn", "unet")
    data_help = "a mask folder (images/ and masks/ per split)"
    img_size_help = "training crop side (default 64)"
    skip_flags = ("--multi-scale",)  # detection's

    task_class = SegmentTask

    def score(self, s: dict[str, Any]) -> str:
        return f"best val mIoU {s['best_val_miou']:.2f}"

    def predict(self, args: Any) -> tuple[str, int]:
        r = predict_segment(args.checkpoint, args.images, args.output, args.device, checkpoint_meta(args))
        return report_predictions("segment", len(r["results"]) + len(r["failed"]), r["output"], r["failed"])


register(SegmentCommands())
