"""Object detection and instance segmentation as a task of the one loop: ``pdevision train --task detect``.

Model: torchvision Mask R-CNN (default) or Faster R-CNN (``--head faster_rcnn``) with FPN on any backbone
(:func:`pdevision.models.dense.create_detection_model`); data: the embedded scenes or a COCO folder
(:mod:`pdevision.data.dense`); loss: torchvision's R-CNN losses summed; metrics: COCO box (and mask) mAP,
mAP50, mAP75 (percent) by torchmetrics' ``MeanAveragePrecision`` on the pycocotools backend (its states are
gathered across ranks); ``best/`` is the highest val box mAP.

Recipes (AdamW; the schedule is the loop's, warm-up then cosine):

* ``light`` (default, this library's): from scratch on the 64-px embedded scenes on a CPU; lr 4e-4 at batch
  8, weight decay 0.05, 1 warm-up epoch, 10 epochs (the embedded default: 3,
  :data:`~pdevision.tasks.segment.EMBEDDED_EPOCHS`), gradient clip 10; images upsampled to a shorter side of
  ``--img-size`` (default 128); a light R-CNN (FPN 64 channels, box head 256, mask head 64, anchors
  16-256, 256/128 RPN proposals, 64 sampled RoIs per image).
* ``mask_rcnn_swin_1x``: Swin Transformer's Mask R-CNN 1x fine-tuning (Liu et al. 2021, arXiv:2103.14030,
  §4.2 and its mmdet config: AdamW, lr 1e-4, weight decay 0.05, batch 16, 12 epochs, multi-scale training
  shorter side 480-800 / longer at most 1333), which the HcNet paper (§4.2) and vHeat follow; torchvision's
  full heads and anchors; the step decay at epochs 8 and 11 is replaced by the loop's cosine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision.utils import draw_bounding_boxes, draw_segmentation_masks

from pdevision._optional import require, require_all
from pdevision.data.dense import build_dense_datasets, check_scene_img_size, detection_collate
from pdevision.engine import validators as V
from pdevision.engine.config import Flag, setting
from pdevision.engine.loop import fit
from pdevision.models.dense import create_detection_model
from pdevision.models.factory import check_model_args
from pdevision.tasks.dense import (
    DenseCommands,
    DenseConfig,
    DensePredictOptions,
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

# optional packages (module, extra) that training and evaluation need: checked before a run starts
REQUIRES = (("torchmetrics", "dense"), ("pycocotools", "dense"), ("matplotlib", "train"))

DETECT_RECIPES = {
    "light": DenseRecipe(
        lr=4e-4,
        batch=8,
        weight_decay=0.05,
        epochs=10,
        warmup_epochs=1.0,
        min_lr=1e-6,
        decoder_channels=64,
        source="this library's CPU recipe (from scratch)",
        clip_grad=10.0,
    ),
    "mask_rcnn_swin_1x": DenseRecipe(
        lr=1e-4,
        batch=16,
        weight_decay=0.05,
        epochs=12,
        warmup_epochs=0.0,
        min_lr=0.0,
        decoder_channels=256,
        source="Swin arXiv:2103.14030 §4.2 (Mask R-CNN 1x, COCO), HcNet §4.2, vHeat",
    ),
}

_LIGHT_DETECTOR = dict(
    representation_size=256,
    mask_channels=64,
    anchor_sizes=(16, 32, 64, 128, 256),
    detector_kwargs=dict(
        rpn_pre_nms_top_n_train=256,
        rpn_post_nms_top_n_train=128,
        rpn_pre_nms_top_n_test=128,
        rpn_post_nms_top_n_test=64,
        box_batch_size_per_image=64,
        box_detections_per_img=20,
    ),
)


def detector_settings(recipe: str, img_size: int, multi_scale: bool) -> dict[str, Any]:
    """Detector arguments of a recipe at shorter side ``img_size``."""
    if recipe == "mask_rcnn_swin_1x":
        return dict(min_size=tuple(range(480, 801, 32)), max_size=1333, fpn_channels=256)  # always multi-scale
    min_size: Any = img_size
    if multi_scale:
        min_size = tuple(sorted({round(img_size * s / 8) * 8 for s in (0.75, 0.875, 1.0, 1.125, 1.25)}))
    return dict(min_size=min_size, max_size=2 * img_size, fpn_channels=64, **_LIGHT_DETECTOR)


def detector_from_meta(meta: dict[str, Any], backbone_kwargs: dict[str, Any]) -> nn.Module:
    """The detector a detect checkpoint's metadata describes (weights not loaded); its settings are checked like
    model arguments (plain values, bounded integers)."""
    where = "in the checkpoint's detector settings"
    settings = (
        dict(meta["detector"]) if isinstance(meta["detector"], dict) else check_model_args(meta["detector"], where)
    )
    check_model_args({k: v for k, v in settings.items() if k != "detector_kwargs"}, where)
    check_model_args(settings.get("detector_kwargs", {}), where)
    settings["anchor_sizes"] = tuple(settings.get("anchor_sizes", (32, 64, 128, 256, 512)))
    if isinstance(settings.get("min_size"), list):
        settings["min_size"] = tuple(settings["min_size"])
    return create_detection_model(meta["model"], len(meta["classes"]), head=meta["head"], **settings, **backbone_kwargs)


class DetectTask(DenseTask):
    """Detection / instance segmentation from a :class:`~pdevision.tasks.segment.DenseConfig`."""

    name = "detect"
    noun = "detection"
    best_metric = "map"
    higher_is_better = True
    collate_fn = staticmethod(detection_collate)

    def __init__(self, config: DenseConfig) -> None:
        if config.recipe not in DETECT_RECIPES:
            raise ValueError(f"detection recipe must be one of {', '.join(DETECT_RECIPES)}, got {config.recipe!r}")
        self.config = config
        self.recipe = DETECT_RECIPES[config.recipe]
        self.head = config.head or "mask_rcnn"
        if self.head not in ("mask_rcnn", "faster_rcnn"):
            raise ValueError(f"detection head must be mask_rcnn or faster_rcnn, got {self.head!r}")
        self.img_size = config.img_size or (128 if config.data is None else 800)
        if config.data is None:
            check_scene_img_size(self.img_size)
        self.settings = detector_settings(config.recipe, self.img_size, config.multi_scale)
        backbone_size = self.img_size if config.data is None else 512
        self.kwargs = model_kwargs(config, backbone_size)
        if config.init_from:
            check_backbone_checkpoint(config.init_from, config.model)

    def datasets(self) -> tuple[Dataset, Dataset]:
        c = self.config
        data = build_dense_datasets("detect", c.data, self.img_size, c.scene_seed, 64, c.train_scenes, c.val_scenes)
        splits = self._take_data(data)
        to_cat = getattr(data.train, "label_to_cat", None)  # COCO: the json's category ids
        self.category_ids = [int(to_cat[i + 1]) for i in range(len(self.classes))] if to_cat else None
        return splits

    def create_model(self) -> nn.Module:
        return create_detection_model(
            self.config.model,
            len(self.classes),
            head=self.head,
            checkpoint=backbone_weights(self.config.init_from),
            **self.settings,
            **self.kwargs,
        )

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        images, targets = plain_tensors(batch)
        losses = model(images, targets)
        loss = sum(losses.values())
        return loss, {k.removeprefix("loss_"): v.item() for k, v in losses.items()}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, ctx: Any) -> dict[str, float]:
        masks = self.head == "mask_rcnn"
        iou_types = ("bbox", "segm") if masks else ("bbox",)
        MeanAveragePrecision = require("torchmetrics.detection", "dense").MeanAveragePrecision
        metric = MeanAveragePrecision(iou_type=iou_types, backend="pycocotools").to(ctx.device)
        model.eval()
        for batch in ctx.loader(self.val_set, batch_size=min(ctx.batch_size, 8)):
            images, targets = ctx.to_device(plain_tensors(batch))
            with ctx.autocast():
                outputs = model(images)
            preds = []
            for o in outputs:
                p = {"boxes": o["boxes"].float(), "scores": o["scores"].float(), "labels": o["labels"]}
                if masks:
                    p["masks"] = o["masks"][:, 0] > 0.5
                preds.append(p)
            gts = []
            for t in targets:
                g = {"boxes": t["boxes"], "labels": t["labels"]}
                if masks:
                    g["masks"] = t["masks"].bool()
                gts.append(g)
            metric.update(preds, gts)
        r = metric.compute()
        prefix = "bbox_" if masks else ""
        out = {
            "map": float(r[f"{prefix}map"]) * 100,
            "map50": float(r[f"{prefix}map_50"]) * 100,
            "map75": float(r[f"{prefix}map_75"]) * 100,
        }
        if masks:
            out.update(
                mask_map=float(r["segm_map"]) * 100,
                mask_map50=float(r["segm_map_50"]) * 100,
                mask_map75=float(r["segm_map_75"]) * 100,
            )
        return {k: max(v, 0.0) if v == v else 0.0 for k, v in out.items()}  # -1 (no objects) reads as 0

    def checkpoint_meta(self) -> dict[str, Any]:
        settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.settings.items()}
        return self._meta(detector=settings, category_ids=self.category_ids)

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        best_row = run.get("best_row") or {}  # the epoch with the highest box mAP (the loop keeps its row)
        best = run.get("best")
        return self._summary(
            best_val_map=float(best) if best is not None else -1.0,
            best_val_map50=float(best_row.get("val_map50", -1.0)),
            best_val_map75=float(best_row.get("val_map75", -1.0)),
            best_val_mask_map=float(best_row.get("val_mask_map", -1.0)),
        )

    def epoch_log(self, row: dict[str, Any]) -> str:
        mask = f" mask mAP {row['val_mask_map']:.2f}" if "val_mask_map" in row else ""
        return (
            f"train loss {row.get('train_loss', float('nan')):.4f}  val box mAP {row.get('val_map', float('nan')):.2f} "
            f"mAP50 {row.get('val_map50', float('nan')):.2f}{mask}"
        )


def train(config: DenseConfig) -> dict[str, Any]:
    """Train a detector as ``config`` says through the one loop; returns the run summary."""
    require_all(REQUIRES)
    return fit(DetectTask(config), config.run)


def predict_detect(
    checkpoint: str | Path,
    images: list[str],
    output: str | Path,
    device: str = "cpu",
    score_threshold: float = 0.5,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Detections of image files at their own size: ``<stem>_overlay.png`` (boxes with class and score, masks) and
    ``predictions.json`` in the COCO result format (``image_id`` the image's position in the list, ``category_id``,
    ``bbox`` ``[x, y, w, h]``, ``score``, and ``segmentation`` as RLE for Mask R-CNN), detections with score below
    ``score_threshold`` left out. Returns ``{"kind", "results", "output"}``. ``meta``: the checkpoint's metadata
    where it was read already."""

    def one(model, uint8, meta, colours, dev, index, path, out, stem):
        overlay, found = _detect_image(model, uint8, meta, colours, dev, score_threshold)
        return overlay, [{"image_id": index, "file_name": str(path), **r} for r in found]

    _, records, failed = predict_files(checkpoint, "detect", detector_from_meta, one, images, output, device, meta)
    results = [r for found in records for r in found]
    write_predictions(output, results)
    return {"kind": "detect", "results": results, "images": len(records), "failed": failed, "output": str(output)}


def _detect_image(
    model: nn.Module, uint8: torch.Tensor, meta: dict[str, Any], colours: list, dev: torch.device, threshold: float
) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Detections of one ``(3, H, W)`` uint8 image above ``threshold``: the overlay and COCO-style results."""
    classes = list(meta["classes"])
    det = model([uint8.float().div(255.0).to(dev)])[0]
    keep = det["scores"] >= threshold
    boxes, scores, labels = det["boxes"][keep].cpu(), det["scores"][keep].cpu(), det["labels"][keep].cpu()
    overlay = uint8
    masks = det["masks"][keep][:, 0].cpu() > 0.5 if "masks" in det else None
    if masks is not None and len(masks):
        overlay = draw_segmentation_masks(overlay, masks, alpha=0.5, colors=[colours[lab - 1] for lab in labels])
    text = [f"{classes[lab - 1]} {s:.2f}" for lab, s in zip(labels.tolist(), scores.tolist(), strict=True)]
    if len(boxes):
        overlay = draw_bounding_boxes(overlay, boxes, text, colors=[colours[lab - 1] for lab in labels])
    cat_ids = meta.get("category_ids") or list(range(1, len(classes) + 1))
    results = []
    for j in range(len(boxes)):
        x0, y0, x1, y1 = boxes[j].tolist()
        r: dict[str, Any] = {
            "category_id": int(cat_ids[int(labels[j]) - 1]),
            "category": classes[int(labels[j]) - 1],
            "bbox": [x0, y0, x1 - x0, y1 - y0],
            "score": float(scores[j]),
        }
        if masks is not None:
            rle = require("pycocotools.mask", "dense").encode(np.asfortranarray(masks[j].numpy().astype(np.uint8)))
            r["segmentation"] = {"size": list(rle["size"]), "counts": rle["counts"].decode()}
        results.append(r)
    return overlay, results


@dataclass
class DetectPredictOptions(DensePredictOptions):
    """``pdevision predict`` with a detection checkpoint: its own flags."""

    score_threshold: float = setting(0.5, V.fraction, Flag(help="lowest score kept (default 0.5)"))


class DetectCommands(DenseCommands):
    name = "detect"
    requires = REQUIRES
    help = "object detection and instance segmentation (default: vheat_micro + Mask R-CNN on the embedded scenes)"
    default_output = "runs/detect"
    noun = "detection"
    recipes = DETECT_RECIPES
    heads = ("mask_rcnn", "faster_rcnn")
    data_help = "a COCO folder (annotations/instances_<split>.json, images)"
    img_size_help = "detector's shorter side (default 128 on the scenes, 800 on COCO)"

    task_class = DetectTask

    def score(self, s: dict[str, Any]) -> str:
        return f"best val box mAP {s['best_val_map']:.2f} (mAP50 {s['best_val_map50']:.2f})"

    predict_options = DetectPredictOptions

    def predict(self, args: Any) -> tuple[str, int]:
        meta = checkpoint_meta(args)
        r = predict_detect(args.checkpoint, args.images, args.output, args.device, args.score_threshold, meta)
        return report_predictions("detect", r["images"] + len(r["failed"]), r["output"], r["failed"])


register(DetectCommands())
