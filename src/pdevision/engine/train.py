"""Supervised training, the public entry point: :func:`train` with every knob a field of :class:`TrainConfig`.

The loop itself is :func:`pdevision.engine.loop.fit`; what is particular to classification (data, model,
mixup, the linear probe, accuracy) is the task :class:`pdevision.tasks.classify.ClassifyTask`. Single process, or
data parallel under ``torchrun``. Rank 0 writes the run folder: ``config.json`` (the resolved recipe),
``metrics.csv``, TensorBoard events, ``last/`` and ``best/`` checkpoints (see :mod:`pdevision.engine.checkpoint`),
``summary.json`` and ``curves.png``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from timm.utils import accuracy
from torch import nn
from torch.utils.data import DataLoader, Dataset

from pdevision.data import RECIPES
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.distributed import DistInfo, all_reduce_sum
from pdevision.engine.loop import fit
from pdevision.engine.runtime import NonFiniteLossError, autocast, write_metrics

# recipe fields a TrainConfig field of the same name overrides when it is not None
RECIPE_KEYS = (
    "epochs",
    "min_lr",
    "warmup_epochs",
    "weight_decay",
    "clip_grad",
    "auto_augment",
    "mixup",
    "cutmix",
    "label_smoothing",
    "re_prob",
    "hflip",
    "ema_decay",
    "opt",
    "momentum",
)


@dataclass
class TrainConfig:
    """All knobs of :func:`train`. ``None`` means: take the value from ``recipe``."""

    model: str = "vheat_micro"
    data: str | None = None  # None: the embedded digits; a folder tree, or a folder of WebDataset shards
    output: str = "runs/train"
    recipe: str = "light"  # light | pderesnet | hcnet | vheat (alias imagenet)
    epochs: int | None = None
    batch_size: int = 64  # per process
    img_size: int | None = None  # None: 64 for the digits, the model's default otherwise
    lr: float | None = None  # absolute; None: recipe lr x global batch / the recipe's reference batch
    opt: str | None = None  # timm optimizer name: sgd, momentum, nesterov, adamw, lamb, ...
    momentum: float | None = None
    min_lr: float | None = None
    warmup_epochs: int | None = None
    weight_decay: float | None = None
    clip_grad: float | None = None
    auto_augment: str | None = None
    mixup: float | None = None
    cutmix: float | None = None
    label_smoothing: float | None = None
    re_prob: float | None = None
    hflip: float | None = None
    ema_decay: float | None = None
    no_ema: bool = False
    drop_path: float | None = None
    amp: str = "none"  # none | bf16 | fp16 (fp16 on CUDA only)
    compile: bool = False  # torch.compile the model for training
    fused_kernels: bool = True  # CPU: linear layers on the oneDNN kernels (LoopConfig.fused_kernels)
    grad_checkpointing: bool = False
    seed: int = 0
    deterministic: bool = False
    workers: int = 0
    val_split: float = 0.2
    verify_images: bool = True
    shuffle_buffer: int = 1000  # WebDataset shards: samples in the shuffle buffer
    resume: str | None = None  # a checkpoint folder or run folder
    overwrite: bool = False  # start a new run in an output folder that holds one
    init_from: str | None = None  # weights to start from (fine-tuning); an encoder checkpoint gets a new head
    reset_head: bool = False  # with init_from: replace the classifier
    linear_probe: bool = False  # freeze everything but the classifier (kept in eval mode), train the classifier
    device: str = "auto"
    stop_after_epochs: int | None = None  # stop (as if interrupted) after this many epochs of the schedule
    max_train_batches: int | None = None  # per epoch, for smoke runs
    time_budget: float | None = None  # seconds of training steps; the schedule follows the spent fraction
    progress: bool = True
    model_args: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> dict[str, Any]:
        """The configuration with every recipe default filled in (what ``config.json`` holds)."""
        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}; choose one of {sorted(RECIPES)}")
        recipe = RECIPES[self.recipe]
        out = dataclasses.asdict(self)
        for key in RECIPE_KEYS:
            if out[key] is None:
                out[key] = getattr(recipe, key)
        if self.no_ema:
            out["ema_decay"] = None
        out["recipe_name"] = recipe.name
        out["recipe_lr"], out["recipe_lr_batch"] = recipe.lr, recipe.lr_batch
        return out


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


def train(config: TrainConfig) -> dict[str, Any]:
    """Train ``config.model`` and return the run summary (also written to ``summary.json``)."""
    # the classification task sits above the engine (it builds data and models); imported here, at call time
    from pdevision.tasks.classify import ClassifyTask, loop_config

    return fit(ClassifyTask(config), loop_config(config))


__all__ = [
    "CheckpointError",
    "NonFiniteLossError",
    "TrainConfig",
    "evaluate_model",
    "train",
    "write_metrics",
]
