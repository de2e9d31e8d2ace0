"""What segmentation and detection share: their configuration (holding the run's), recipes, the backbone check of
``--init-from``, the task base, and the prediction loop over image files."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

from pdevision._optional import require
from pdevision.data.imageio import ImageReadError, read_rgb_array
from pdevision.data.listing import list_images
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import (
    CheckpointError,
    check_finite_weights,
    checkpoint_kind,
    load_weights,
    read_meta,
    resolve_checkpoint,
)
from pdevision.engine.config import Flag, RunConfig, setting
from pdevision.engine.modeling import load_checkpoint_model
from pdevision.engine.runtime import resolve_device
from pdevision.engine.task import Task
from pdevision.errors import PartialFailure, UsageError
from pdevision.fastpath import on_device
from pdevision.tasks.registry import TaskCommands


@dataclass(frozen=True, kw_only=True)
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


# the group of the dense tasks' flags; {noun}: the task's (DenseCommands.fill)
DATA_AND_MODEL = "{noun}: data and model"


@dataclass
class DenseConfig:
    """Knobs of ``pdevision train --task segment|detect`` (``None``: the recipe's or the task's default).

    Each field with a :class:`~pdevision.engine.config.Flag` is a flag of both tasks (made by
    :meth:`DenseCommands.add_arguments`); the braces in its help are the task's words (:meth:`DenseCommands.fill`),
    the heads and recipes to choose from the task's own (:meth:`DenseCommands.flags`)."""

    model: str = setting(
        "vheat_micro", None, Flag(DATA_AND_MODEL, "backbone: any registered model (default vheat_micro)")
    )
    model_args: dict[str, Any] = setting(  # noqa: RUF009  (a dataclasses.field with a default_factory)
        factory=dict, type=V.json_dict, flag=Flag(DATA_AND_MODEL, "JSON backbone arguments (no weights, URLs or paths)")
    )
    # segment: upernet | fpn | unet; detect: mask_rcnn | faster_rcnn (the flag's choices: the task's heads)
    head: str | None = setting(None, None, Flag(DATA_AND_MODEL, "default {head}"))
    # None: the embedded scenes; a mask folder (segment) or a COCO folder (detect)
    data: str | None = setting(None, V.path, Flag(DATA_AND_MODEL, "{data}; default: the embedded scenes"))
    # training crop (segment) / detector shorter side (detect)
    img_size: int | None = setting(None, V.side, Flag(DATA_AND_MODEL, "{img_size}"))
    recipe: str = setting("light", None, Flag(DATA_AND_MODEL, "default light (this library's)"))
    fve_resize: str | None = setting(  # vHeat: interp | pad | downstream
        None, None, Flag(DATA_AND_MODEL, "vHeat FVE rule", choices=("interp", "pad", "downstream"))
    )
    drop_path: float | None = setting(None, V.drop_rate, Flag(DATA_AND_MODEL, "stochastic depth (default: model's)"))
    init_from: str | None = setting(
        None, V.path, Flag(DATA_AND_MODEL, "backbone checkpoint (classification or encoder)")
    )
    train_scenes: int | None = setting(None, V.scenes, Flag(DATA_AND_MODEL, "embedded scenes: train set size"))
    val_scenes: int | None = setting(None, V.scenes, Flag(DATA_AND_MODEL, "embedded scenes: val set size"))
    scene_seed: int = 0  # the embedded scenes' generator: a fixed split whatever the run's seed is
    # detect only (segment skips the flag): shorter side drawn from 0.75-1.25 x img_size per batch
    multi_scale: bool = setting(False, None, Flag(DATA_AND_MODEL, "multi-scale training (shorter side)"))
    run: RunConfig = field(default_factory=RunConfig)


def plain_tensors(x: Any) -> Any:
    """tv_tensors back to plain tensors (the models and losses want ``torch.Tensor``)."""
    if isinstance(x, torch.Tensor):
        return x.as_subclass(torch.Tensor)
    if isinstance(x, (list, tuple)):
        return type(x)(plain_tensors(v) for v in x)
    if isinstance(x, dict):
        return {k: plain_tensors(v) for k, v in x.items()}
    return x


def check_backbone_checkpoint(path: str, model: str) -> dict[str, Any]:
    """Metadata of an ``--init-from`` checkpoint after checking it holds ``model``'s backbone (a classification
    checkpoint or a pretrained encoder)."""
    meta = read_meta(path)
    kind = checkpoint_kind(meta)
    if kind == "pretrain":
        raise CheckpointError(f"{path} is a pretraining state; use its encoder/ folder with --init-from")
    if kind not in (None, "classify", "encoder"):  # None: a backbone saved without a task (weights only)
        raise CheckpointError(
            f"{path} is a {kind} checkpoint; --init-from takes a classification checkpoint or a "
            "pretrained encoder (a dense run continues with --resume)"
        )
    if meta.get("model") and meta["model"] != model:
        raise CheckpointError(f"{path} holds a {meta['model']!r} backbone, not {model!r} (use --model {meta['model']})")
    check_finite_weights(load_weights(path), resolve_checkpoint(path))
    return meta


def backbone_weights(path: str | None) -> Path | None:
    """The weights file of an ``--init-from`` checkpoint folder (or run folder), for the backbone builders."""
    return None if path is None else resolve_checkpoint(path) / "model.safetensors"


def model_kwargs(config: DenseConfig, img_size: int) -> dict[str, Any]:
    kwargs = dict(config.model_args)
    if config.drop_path is not None:
        kwargs["drop_path_rate"] = config.drop_path
    kwargs.setdefault("img_size", img_size)
    if config.fve_resize is not None:
        kwargs["fve_resize"] = config.fve_resize
    return kwargs


class DenseTask(Task):
    """What segmentation and detection share: the data bookkeeping, the resume check and the common part of the
    checkpoint metadata and of the summary. Subclasses set ``name`` (also the checkpoint ``kind``), ``noun``,
    ``config``, ``recipe``, ``head``, ``img_size`` and ``kwargs``."""

    noun = "dense"
    config: DenseConfig
    recipe: DenseRecipe
    default_batch = 8

    def run_defaults(self) -> dict[str, Any]:
        """The recipe's optimiser and schedule; on the embedded scenes with the light recipe and no time budget,
        the measured number of epochs (:data:`EMBEDDED_EPOCHS`)."""
        r, c = self.recipe, self.config
        epochs = r.epochs
        if c.data is None and c.recipe == "light" and c.run.time_budget is None:
            epochs = EMBEDDED_EPOCHS[self.name]
        return {
            "epochs": epochs,
            "batch_size": self.default_batch,
            "lr_base": r.lr,
            "lr_base_batch": r.batch,
            "opt": "adamw",
            "weight_decay": r.weight_decay,
            "min_lr": r.min_lr,
            "warmup_epochs": r.warmup_epochs,
            "clip_grad": r.clip_grad or 0.0,
        }

    def config_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self.config).items() if k != "run"}, "recipe_values": asdict(self.recipe)}

    def _take_data(self, data: Any) -> tuple[Dataset, Dataset]:
        self.classes, self.source = data.classes, data.source
        self.sizes = (len(data.train), len(data.val))
        self.val_set = data.val
        return data.train, data.val

    def _meta(self, **extra: Any) -> dict[str, Any]:
        common = {"kind": self.name, "model": self.config.model, "head": self.head, "classes": self.classes}
        return {**common, "img_size": self.img_size, "model_args": self.kwargs, **extra}

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


def palette(n: int) -> list[tuple[int, int, int]]:
    """Distinct colours (matplotlib's tab20), cycled."""
    cmap = require("matplotlib", "train").colormaps["tab20"]
    return [tuple(int(255 * c) for c in cmap(i % 20)[:3]) for i in range(n)]


def predict_files(
    checkpoint: str | Path,
    kind: str,
    build: Callable[[dict[str, Any], dict[str, Any]], nn.Module],
    predict_one: Callable[..., tuple[torch.Tensor, Any]],
    images: list[str],
    output: str | Path,
    device: str = "cpu",
    meta: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Any], dict[str, str]]:
    """Run a ``kind`` checkpoint on image files (folders: every image in them and their sub-folders,
    :func:`~pdevision.data.listing.list_images`) at their own size (read by the library's one reader): writes
    ``<stem>_overlay.png`` per image (``<stem>-2_overlay.png`` for the second image of that stem);
    ``predict_one(model, uint8, meta, colours, device, index, path, out, stem)`` returns the overlay and the image's
    records. Returns the metadata, the records of every image read, and the reason of each image that could not be
    read (by path; the others go on). ``meta``: the checkpoint's metadata where it was read already."""
    listed = list_images(images)
    dev = resolve_device(device)
    model, meta, _ = load_checkpoint_model(checkpoint, (kind,), build, meta=meta)
    on_device(model, dev)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    colours = palette(len(meta["classes"]))
    records: list[Any] = []
    failed: dict[str, str] = {}
    stems: Counter[str] = Counter()
    for index, image in enumerate(listed):
        path = image.path
        stems[path.stem] += 1
        stem = path.stem if stems[path.stem] == 1 else f"{path.stem}-{stems[path.stem]}"  # val/a/x.png, val/b/x.png
        try:
            uint8 = torch.from_numpy(read_rgb_array(path)).permute(2, 0, 1).contiguous()  # the one reader
        except ImageReadError as exc:
            failed[str(path)] = str(exc)
            continue
        with torch.no_grad():
            overlay, found = predict_one(model, uint8, meta, colours, dev, index, path, out, stem)
        records.append(found)
        Image.fromarray(overlay.permute(1, 2, 0).numpy()).save(out / f"{stem}_overlay.png")
    return meta, records, failed


def report_predictions(kind: str, count: int, output: str | Path, failed: dict[str, str]) -> tuple[str, int]:
    """``predict``'s summary line for a segmentation or detection run over ``count`` images; each unreadable image
    named on stderr, then a :class:`~pdevision.errors.PartialFailure` (exit 3) where any was."""
    for path, reason in failed.items():
        print(f"{path}: FAILED: {reason}", file=sys.stderr)
    text = f"{kind}: {count - len(failed)} images, overlays and predictions.json in {output}"
    if failed:
        print(text)
        raise PartialFailure(f"{len(failed)} of {count} images could not be read")
    return text, 0


def write_predictions(out: str | Path, results: list[Any]) -> None:
    (Path(out) / "predictions.json").write_text(json.dumps(results, indent=1))


@dataclass
class DensePredictOptions:
    """``pdevision predict`` with a segmentation or detection checkpoint: its own flags."""

    output: str = setting("runs/predict", V.output_folder, Flag(help="folder (default runs/predict)"))


class DenseCommands(TaskCommands):
    """The flags segmentation and detection share (the fields of ``config_class``); subclasses set ``recipes``,
    ``heads``, the words of their help (``noun``, ``data_help``, ``img_size_help``) and ``predict``."""

    config_class: type[DenseConfig] = DenseConfig
    predict_options: type = DensePredictOptions
    recipes: ClassVar[dict[str, DenseRecipe]] = {}
    heads: tuple[str, ...] = ()
    noun = "dense"
    data_help: str  # what --data names, e.g. "a mask folder (images/ and masks/ per split)"
    img_size_help: str  # what --img-size is, with its default

    def fill(self) -> dict[str, str]:
        """The task's words in the group title and the help of the flags (the braces of :class:`DenseConfig`)."""
        return {
            "{noun}": self.noun,
            "{head}": self.heads[0],
            "{data}": self.data_help,
            "{img_size}": self.img_size_help,
        }

    def flags(self) -> dict[str, dict[str, Any]]:
        """The task's choices of ``--head`` and ``--recipe``."""
        return {"head": {"choices": self.heads}, "recipe": {"choices": tuple(sorted(self.recipes))}}

    def report(self, s: dict[str, Any], config: DenseConfig) -> str:
        return (
            f"{s['model']} + {s['head']} on {s['data']}: {s['status']}, {s['epochs_run']} epochs in "
            f"{s['seconds']:.0f} s; {self.score(s)}; {s['train_images']} train / {s['val_images']} val images; "
            f"run folder {config.run.output}"
        )

    def score(self, s: dict[str, Any]) -> str:
        raise NotImplementedError

    def evaluate(self, args: argparse.Namespace) -> str:
        raise UsageError(
            f"{args.checkpoint} is a {self.name} checkpoint: its validation scores are in the run's metrics.csv and "
            f"summary.json; `pdevision predict --checkpoint {args.checkpoint} IMAGES` applies it to images"
        )


__all__ = [
    "EMBEDDED_EPOCHS",
    "DenseCommands",
    "DenseConfig",
    "DensePredictOptions",
    "DenseRecipe",
    "DenseTask",
    "backbone_weights",
    "check_backbone_checkpoint",
    "model_kwargs",
    "palette",
    "plain_tensors",
    "predict_files",
    "report_predictions",
    "write_predictions",
]
