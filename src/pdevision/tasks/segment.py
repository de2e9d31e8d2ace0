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

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from pdevision.data.dense import IGNORE_INDEX, IMAGENET_MEAN, IMAGENET_STD, build_dense_datasets
from pdevision.engine.checkpoint import CheckpointError, load_weights, read_meta, resolve_checkpoint
from pdevision.models.dense import create_segmentation_model
from pdevision.tasks.base import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DenseRecipe:
    """Optimiser and schedule of a dense task; ``lr`` is for ``batch`` images per update (scaled linearly)."""

    lr: float
    batch: int
    weight_decay: float
    epochs: int
    warmup_epochs: float
    min_lr: float
    decoder_channels: int
    source: str
    clip_grad: float | None = None
    scale_range: tuple[float, float] = (0.5, 2.0)  # random resize ratio (segmentation)
    photometric: bool = True  # segmentation: colour jitter of mmseg's photometric distortion


# epochs of `pdevision train --task segment|detect` with no --data, --epochs or --time-budget (the `light`
# recipe on the embedded scenes): a fixed number of steps, sized from their measured CPU time so that the whole
# run ends within 6 (segment) and 8 (detect) minutes on a quiet 2-core machine (README, benchmarks/dense_runs)
EMBEDDED_EPOCHS = {"segment": 15, "detect": 3}

SEGMENT_RECIPES = {
    "light": DenseRecipe(
        3e-3,
        8,
        0.05,
        8,
        1.0,
        1e-5,
        64,
        "this library's CPU recipe (from scratch)",
        scale_range=(0.9, 1.25),
        photometric=False,
    ),
    "upernet_swin": DenseRecipe(
        6e-5, 16, 0.01, 12, 1.0, 0.0, 512, "Swin arXiv:2103.14030 §4.3 (UPerNet, ADE20K), HcNet §4.3, vHeat"
    ),
}


@dataclass
class DenseConfig:
    """Knobs of ``pdevision train --task segment|detect`` (``None``: the recipe's or the task's default)."""

    task: str = "segment"
    model: str = "vheat_micro"
    head: str | None = None  # segment: upernet | fpn | unet; detect: mask_rcnn | faster_rcnn
    data: str | None = None  # None: the embedded scenes; a mask folder (segment) or a COCO folder (detect)
    output: str = "runs/segment"
    recipe: str = "light"
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    warmup_epochs: float | None = None
    img_size: int | None = None  # training crop (segment) / detector shorter side (detect)
    init_from: str | None = None
    fve_resize: str | None = None  # vHeat: interp | pad | downstream
    model_args: dict[str, Any] = field(default_factory=dict)
    train_scenes: int | None = None
    val_scenes: int | None = None
    seed: int = 0  # the training's (initialisation, order, augmentation)
    scene_seed: int = 0  # the embedded scenes' generator: a fixed split whatever ``seed`` is
    amp: str = "none"
    device: str = "auto"
    workers: int = 0
    resume: str | None = None
    overwrite: bool = False  # start a new run in an output folder that holds one
    time_budget: float | None = None
    stop_after_epochs: int | None = None
    max_train_batches: int | None = None
    progress: bool = True
    multi_scale: bool = False  # detect: shorter side drawn from 0.75-1.25 x img_size per batch


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


def _plain(x: Any) -> Any:
    """tv_tensors back to plain tensors (the models and losses want ``torch.Tensor``)."""
    if isinstance(x, torch.Tensor):
        return x.as_subclass(torch.Tensor)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def check_backbone_checkpoint(path: str, model: str) -> dict[str, Any]:
    """Metadata of an ``--init-from`` checkpoint after checking it holds ``model``'s backbone."""
    meta = read_meta(path)
    if meta.get("kind") == "pretrain":
        raise CheckpointError(f"{path} is a pretraining state; use its encoder/ folder with --init-from")
    if meta.get("kind") in ("segment", "detect"):
        raise CheckpointError(f"{path} is a {meta['kind']} checkpoint; resume it with --resume")
    if meta.get("model") and meta["model"] != model:
        raise CheckpointError(f"{path} holds a {meta['model']!r} backbone, not {model!r} (use --model {meta['model']})")
    return meta


def model_kwargs(config: DenseConfig, img_size: int) -> dict[str, Any]:
    kwargs = dict(config.model_args)
    kwargs.setdefault("img_size", img_size)
    if config.fve_resize is not None:
        kwargs["fve_resize"] = config.fve_resize
    return kwargs


class DenseTask(Task):
    """What segmentation and detection share: the data bookkeeping, the resume check and the common part of the
    checkpoint metadata and of the summary. Subclasses set ``name`` (also the checkpoint ``kind``), ``noun``,
    ``config``, ``recipe``, ``head``, ``img_size`` and ``kwargs``."""

    noun = "dense"

    def _take_data(self, data: Any) -> tuple[Dataset, Dataset]:
        self.classes, self.source = data.classes, data.source
        self.sizes = (len(data.train), len(data.val))
        self.val_set = data.val
        return data.train, data.val

    def _meta(self, **extra: Any) -> dict[str, Any]:
        common = {"kind": self.name, "model": self.config.model, "head": self.head, "classes": self.classes}
        return {**common, "img_size": self.img_size, "model_args": self.kwargs, **extra}

    def check_resume(self, meta: dict[str, Any]) -> None:
        if meta.get("kind") != self.name:
            raise CheckpointError(f"that is not a {self.noun} checkpoint (kind {meta.get('kind')!r})")

    def _summary(self, **scores: Any) -> dict[str, Any]:
        return {
            "task": self.name,
            "model": self.config.model,
            "head": self.head,
            **scores,
            "classes": self.classes,
            "data": self.source,
            "train_images": self.sizes[0],
            "val_images": self.sizes[1],
            "img_size": self.img_size,
            "recipe": self.config.recipe,
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
        self.kwargs = model_kwargs(config, self.img_size)
        if config.init_from:
            check_backbone_checkpoint(config.init_from, config.model)

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

    def build_model(self) -> nn.Module:
        return create_segmentation_model(
            self.config.model,
            len(self.classes),
            head=self.head,
            checkpoint=(  # the weights file of an --init-from folder: the models layer takes files, not folders
                resolve_checkpoint(self.config.init_from) / "model.safetensors"
                if self.config.init_from and Path(self.config.init_from).is_dir()
                else self.config.init_from or None
            ),
            decoder_channels=self.recipe.decoder_channels,
            **self.kwargs,
        )

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        images, masks = _plain(batch)
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
            images, masks = ctx.to_device(_plain(batch))
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
            decoder_channels=self.recipe.decoder_channels, mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD)
        )

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        best = run.get("best")
        out = self._summary(best_val_miou=float(best) if best is not None else -1.0)
        out["val_iou_per_class"] = dict(zip(self.classes, getattr(self, "last_iou", []), strict=False))
        return out

    def epoch_log(self, row: dict[str, Any]) -> str:
        return (
            f"train loss {row.get('train_loss', float('nan')):.4f}  val loss {row.get('val_loss', float('nan')):.4f} "
            f"mIoU {row.get('val_miou', float('nan')):.2f}% pixel acc {row.get('val_pixel_acc', float('nan')):.2f}%"
        )


def loop_config(config: DenseConfig, recipe: DenseRecipe, default_batch: int) -> Any:
    """The loop's knobs for a dense task (AdamW, the recipe's lr scaled to the batch, cosine)."""
    from pdevision.engine.loop import LoopConfig, runtime_of

    batch = config.batch_size or default_batch
    cfg = {**asdict(config), "recipe_values": asdict(recipe)}
    return LoopConfig(
        output=config.output,
        epochs=config.epochs or recipe.epochs,
        batch_size=batch,
        lr=config.lr,
        lr_base=recipe.lr,
        lr_base_batch=recipe.batch,
        opt="adamw",
        weight_decay=recipe.weight_decay if config.weight_decay is None else config.weight_decay,
        min_lr=recipe.min_lr,
        warmup_epochs=recipe.warmup_epochs if config.warmup_epochs is None else config.warmup_epochs,
        clip_grad=recipe.clip_grad,
        config_json=cfg,
        **runtime_of(config),
    )


def train_dense(config: DenseConfig) -> dict[str, Any]:
    """Train ``config.task`` (``"segment"`` or ``"detect"``) through the one loop; returns the summary."""
    from pdevision.engine.loop import fit

    start = time.perf_counter()
    if config.task == "segment":
        task: Task = SegmentTask(config)
        default_batch = 8
    elif config.task == "detect":
        from pdevision.tasks.detect import DetectTask

        task = DetectTask(config)
        default_batch = 8
    else:
        raise ValueError(f"dense task must be 'segment' or 'detect', got {config.task!r}")
    loop = loop_config(config, task.recipe, default_batch)  # type: ignore[attr-defined]
    if config.data is None and config.epochs is None and config.time_budget is None and config.recipe == "light":
        loop.epochs = EMBEDDED_EPOCHS[config.task]  # the embedded default: a fixed, measured number of steps
    summary = fit(task, loop)
    log.info("%s finished in %.0f s", config.task, time.perf_counter() - start)
    return summary


def dense_model_from_meta(meta: dict[str, Any]) -> nn.Module:
    """The segmentation or detection model a dense checkpoint's metadata describes (weights not loaded)."""
    kind = meta.get("kind")
    args = dict(meta.get("model_args", {}))
    args.pop("drop_path_rate", None)
    if kind == "segment":
        return create_segmentation_model(
            meta["model"], len(meta["classes"]), head=meta["head"], decoder_channels=meta["decoder_channels"], **args
        )
    if kind == "detect":
        from pdevision.tasks.detect import detector_from_meta

        return detector_from_meta(meta, args)
    raise CheckpointError(f"not a segmentation or detection checkpoint (kind {kind!r})")


def load_dense_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Model and metadata of a segmentation or detection checkpoint, in eval mode."""
    meta = read_meta(path)
    model = dense_model_from_meta(meta)
    model.load_state_dict(load_weights(path))
    return model.eval(), meta


def _palette(n: int) -> list[tuple[int, int, int]]:
    """Distinct colours (matplotlib's tab20), cycled."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return [tuple(int(255 * c) for c in cmap(i % 20)[:3]) for i in range(n)]


def predict_dense(
    checkpoint: str | Path,
    images: list[str],
    output: str | Path,
    device: str = "cpu",
    score_threshold: float = 0.5,
) -> dict[str, Any]:
    """Run a segmentation or detection checkpoint on image files at their own size.

    Writes ``<stem>_overlay.png`` per image (classes coloured; boxes with class and score) and
    ``predictions.json``: for segmentation a list of ``{image, size, label_png, pixels per class}``
    (``<stem>_labels.png`` holds the class index per pixel); for detection the COCO result format
    (``image_id`` the image's position in the list, ``category_id``, ``bbox`` ``[x, y, w, h]``,
    ``score``, and ``segmentation`` as RLE for Mask R-CNN), detections with score below
    ``score_threshold`` left out. Images are read by the library's one loader (16-bit and float images scaled,
    decompression bombs refused: :class:`~pdevision.data.ImageReadError`). Returns ``{"kind", "results", "output"}``.
    """
    from PIL import Image

    from pdevision.data import open_rgb
    from pdevision.engine.runtime import resolve_device

    dev = resolve_device(device)
    model, meta = load_dense_checkpoint(checkpoint)
    model.to(dev)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    colours = _palette(len(meta["classes"]))
    results: list[dict[str, Any]] = []
    for index, name in enumerate(images):
        path = Path(name)
        uint8 = torch.from_numpy(np.array(open_rgb(path))).permute(2, 0, 1).contiguous()
        with torch.no_grad():
            if meta["kind"] == "segment":
                overlay, found = _segment_image(model, uint8, meta, colours, dev, out / f"{path.stem}_labels.png")
                found["image"] = str(path)
                results.append(found)
            else:
                overlay, found = _detect_image(model, uint8, meta, colours, dev, score_threshold)
                results += [{"image_id": index, "file_name": str(path), **r} for r in found]
        Image.fromarray(overlay.permute(1, 2, 0).numpy()).save(out / f"{path.stem}_overlay.png")
    (out / "predictions.json").write_text(json.dumps(results, indent=1))
    return {"kind": meta["kind"], "results": results, "output": str(out)}


def _segment_image(
    model: nn.Module, uint8: torch.Tensor, meta: dict[str, Any], colours: list, dev: torch.device, label_png: Path
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Class map of one ``(3, H, W)`` uint8 image, written to ``label_png``; the overlay and the image's record."""
    from PIL import Image
    from torchvision.utils import draw_segmentation_masks

    classes = list(meta["classes"])
    mean = torch.tensor(meta["mean"])[:, None, None]
    std = torch.tensor(meta["std"])[:, None, None]
    labels = model(((uint8.float().div(255.0) - mean) / std)[None].to(dev))[0].argmax(0).cpu()
    Image.fromarray(labels.numpy().astype(np.uint8)).save(label_png)
    shown = [c for c in labels.unique().tolist() if classes[c] != "background"]
    masks = torch.stack([labels == c for c in shown]) if shown else torch.zeros(0, *labels.shape, dtype=torch.bool)
    overlay = draw_segmentation_masks(uint8, masks, alpha=0.5, colors=[colours[c] for c in shown])
    counts = torch.bincount(labels.flatten(), minlength=len(classes)).tolist()
    record = {
        "size": [int(uint8.shape[1]), int(uint8.shape[2])],
        "label_png": label_png.name,
        "pixels": {classes[c]: n for c, n in enumerate(counts) if n},
    }
    return overlay, record


def _detect_image(
    model: nn.Module, uint8: torch.Tensor, meta: dict[str, Any], colours: list, dev: torch.device, threshold: float
) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Detections of one ``(3, H, W)`` uint8 image above ``threshold``: the overlay and COCO-style results."""
    from torchvision.utils import draw_bounding_boxes, draw_segmentation_masks

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
            from pycocotools import mask as mask_utils

            rle = mask_utils.encode(np.asfortranarray(masks[j].numpy().astype(np.uint8)))
            r["segmentation"] = {"size": list(rle["size"]), "counts": rle["counts"].decode()}
        results.append(r)
    return overlay, results
