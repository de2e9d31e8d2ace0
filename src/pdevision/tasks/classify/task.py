"""Image classification as a task of the one loop: today's supervised training (``pdevision train``).

What is particular to it: the data (embedded digits, a folder tree, or WebDataset shards) with timm transforms of
the recipe, the model (optionally initialised from a checkpoint or a pretrained encoder, optionally frozen but for
its classifier: the linear probe), mixup/cutmix and label smoothing, and top-1/top-5 accuracy; ``best/`` is the
highest validation top-1 of the model or its EMA.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from torch import nn
from torch.utils.data import DataLoader, Dataset

from pdevision.data import RECIPES, build_datasets, build_transforms
from pdevision.data.embedded import check_embedded_size, embedded_default_size, is_embedded
from pdevision.data.shards import is_shard_folder, shard_datasets
from pdevision.engine.checkpoint import CheckpointError, checkpoint_kind, read_meta, resolve_checkpoint
from pdevision.engine.distributed import DistInfo
from pdevision.engine.modeling import (
    check_image_size,
    checked_model_args,
    create_model,
    load_into_model,
    load_released,
    released_tag,
)
from pdevision.engine.runtime import autocast
from pdevision.engine.task import RunContext, Task
from pdevision.errors import UsageError
from pdevision.tasks.classify.config import RECIPE_TASK_FIELDS, ClassifyConfig
from pdevision.tasks.classify.evaluate import evaluate_model

log = logging.getLogger(__name__)

# optional packages (module, extra) that training and evaluation need: checked before a run starts. None: the figures
# (curves, confusion matrix) are drawn only where matplotlib is installed, and scikit-learn is asked for only where
# one folder (or an embedded set) is split
REQUIRES: tuple[tuple[str, str], ...] = ()


class ClassifyTask(Task):
    """Supervised classification from a :class:`ClassifyConfig`."""

    name = "classify"
    best_metric = "top1"
    higher_is_better = True

    def __init__(self, config: ClassifyConfig) -> None:
        self.config = config
        self.cfg = config.resolved()
        self.probe: _ProbeStandardiser | None = None
        self.model: nn.Module | None = None
        self.init_meta = read_meta(config.init_from, model=config.model) if config.init_from else None
        kind = checkpoint_kind(self.init_meta or {}) if self.init_meta is not None else None
        if kind == "pretrain":
            folder = resolve_checkpoint(str(config.init_from))
            raise CheckpointError(
                f"{folder} is a pretraining state (encoder, predictor, decoder); fine-tune its backbone with "
                f"--init-from {folder.parent / 'encoder'}"
            )
        if kind not in (None, "classify", "encoder"):
            raise CheckpointError(
                f"--init-from {config.init_from} is a {kind} checkpoint; classification starts from a classification "
                "checkpoint or a pretrained encoder (RUN/encoder)"
            )
        if config.pretrained:
            if config.init_from:
                raise CheckpointError("--pretrained and --init-from both name starting weights; give one of them")
            released_tag(config.model)  # before any data is read: a model without released weights is refused
        self.from_encoder = kind == "encoder"  # backbone written by `pdevision pretrain`: no classifier
        self.model_args = dict(config.model_args)
        # the embedded sets are small images: 64 px (a Pathfinder set: its own size) unless asked; folders and
        # shards take the model's default
        self.embedded = config.data is None or is_embedded(config.data)
        self.img_size = (config.img_size or embedded_default_size(config.data)) if self.embedded else config.img_size
        if self.from_encoder:
            assert self.init_meta is not None
            stored = self.init_meta.get("model_args", {})
            kept = {k: v for k, v in stored.items() if k not in ("img_size", "drop_path_rate")}
            self.model_args = {**kept, **self.model_args}
            checked_model_args(self.init_meta)  # its image size and arguments, bounded like any checkpoint's
            self.img_size = config.img_size or int(self.init_meta["img_size"])
        if config.drop_path is not None:
            self.model_args["drop_path_rate"] = config.drop_path
        if self.embedded and self.img_size:  # before any model is built at that size
            check_embedded_size(str(config.data or "digits"), self.img_size)

    def run_defaults(self) -> dict[str, Any]:
        return self.config.run_defaults()

    def config_json(self) -> dict[str, Any]:
        return self.cfg

    def datasets(self) -> tuple[Dataset, Dataset]:
        """Transforms from the recipe at the model's resolution and normalisation, then the data sets."""
        config, cfg = self.config, self.cfg
        recipe = dataclasses.replace(RECIPES[config.recipe], **{k: cfg[k] for k in RECIPE_TASK_FIELDS})
        probe = create_model(config.model, num_classes=1, img_size=self.img_size, **self.model_args)
        data_cfg = timm.data.resolve_data_config({}, model=probe)
        self.img_size = self.img_size or int(data_cfg["input_size"][-1])
        check_image_size(probe, self.img_size)
        self.mean, self.std = list(data_cfg["mean"]), list(data_cfg["std"])
        train_tf, val_tf = build_transforms(recipe, self.img_size, data_cfg["mean"], data_cfg["std"])
        train_set, val_set = _datasets(config, self.img_size, train_tf, val_tf)
        self.classes = list(train_set.classes)
        self.skipped = sorted(set(getattr(train_set, "skipped", [])) | set(getattr(val_set, "skipped", [])))
        self.sizes = tuple(getattr(d, "count", None) or len(d) for d in (train_set, val_set))  # shards: all ranks
        return train_set, val_set

    def create_model(self) -> nn.Module:
        config, cfg = self.config, self.cfg
        model = create_model(config.model, num_classes=len(self.classes), img_size=self.img_size, **self.model_args)
        if self.init_meta is not None:
            reset_head = config.reset_head or self.from_encoder
            load_into_model(model, config.init_from, config.model, self.classes, reset_head, self.init_meta)
        if config.pretrained:
            log.info("initialised %s from its released weights %s", config.model, load_released(model, config.model))
        if config.linear_probe:
            _freeze_all_but_classifier(model)
        if config.grad_checkpointing:
            model.set_grad_checkpointing(True)
        self.mixup = None
        self.criterion: nn.Module = nn.CrossEntropyLoss(label_smoothing=cfg["label_smoothing"])
        if cfg["mixup"] > 0 or cfg["cutmix"] > 0:
            self.mixup = Mixup(
                mixup_alpha=cfg["mixup"],
                cutmix_alpha=cfg["cutmix"],
                label_smoothing=cfg["label_smoothing"],
                num_classes=len(self.classes),
            )
            self.criterion = SoftTargetCrossEntropy()
        self.model = model
        return model

    def prepare(self, model: nn.Module, ctx: RunContext) -> None:
        if self.config.linear_probe:  # before the EMA copy, which must standardise its classifier's input too
            self.probe = _ProbeStandardiser.from_data(
                model, ctx.train_loader, ctx.steps_per_epoch, ctx.device, ctx.info, ctx.amp
            )

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        images, labels = batch
        if self.config.linear_probe and self.model is not None:  # the frozen backbone: norm statistics kept
            self.model.eval()
            self.model.get_classifier().train()
        hard_labels = labels
        if self.mixup is not None:
            images, labels = self.mixup(images, labels)
        logits = model(images)
        loss = self.criterion(logits.float(), labels)
        top1 = (logits.argmax(1) == hard_labels).float().mean().item() * 100.0
        return loss, {"top1": top1}

    def evaluate(self, model: nn.Module, ctx: RunContext) -> dict[str, float]:
        r = evaluate_model(model, self.val_set, ctx.batch_size, ctx.device, ctx.info, ctx.amp, ctx.workers)
        return {"loss": r["loss"], "top1": r["top1"], "top5": r["top5"]}

    def checkpoint_meta(self) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "classes": self.classes,
            "img_size": self.img_size,
            "model_args": {**self.model_args, "img_size": self.img_size},
            "mean": self.mean,
            "std": self.std,
            # an embedded set's name, so `pdevision eval` evaluates on the same set by default (never a path)
            "data": str(self.config.data or "digits") if self.embedded else None,
        }

    def load_for_resume(self, model: nn.Module, folder: Path) -> None:
        load_into_model(model, folder, self.config.model, self.classes)

    @contextlib.contextmanager
    def saving(self, model: nn.Module, ema: nn.Module | None):
        """Checkpoints hold an ordinary classifier: the probe's standardisation is folded in while they are written."""
        if self.probe is None:
            yield
            return
        heads = [m.get_classifier() for m in (model, ema) if m is not None]
        self._heads = self.probe.head_states(heads)
        with self.probe.folded(heads):
            yield

    def extra_state(self) -> dict[str, Any]:
        return {"probe_heads": self._heads} if self.probe is not None else {}

    def load_extra_state(self, state: dict[str, Any], model: nn.Module, ema: nn.Module | None) -> None:
        if self.probe is not None:  # the checkpoint holds the folded classifier; continue from the trained one
            self.probe.load_heads(state["probe_heads"], model, ema)

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "best_val_top1": run["best"] if run["best"] is not None else -1.0,
            "classes": self.classes,
            "train_images": self.sizes[0],
            "val_images": self.sizes[1],
            "skipped_images": self.skipped,
            "img_size": self.img_size,
        }

    def epoch_log(self, row: dict[str, Any]) -> str:
        ema = f" (EMA {row['val_top1_ema']:.2f}%)" if row.get("val_top1_ema") is not None else ""
        return (
            f"train loss {row['train_loss']:.4f} acc {row['train_top1']:.2f}%  val loss {row['val_loss']:.4f} "
            f"top1 {row['val_top1']:.2f}% top5 {row['val_top5']:.2f}%{ema}  {row['train_images_per_s']:.0f} img/s"
        )


def _datasets(config: ClassifyConfig, img_size: int, train_tf: Any, val_tf: Any) -> tuple[Dataset, Dataset]:
    """Shards when ``config.data`` holds ``train/*.tar``, else the digits or a folder tree."""
    if config.data is not None and is_shard_folder(config.data):
        return shard_datasets(config.data, train_tf, val_tf, seed=config.run.seed, buffer=config.shuffle_buffer)
    return build_datasets(config.data, img_size, config.val_split, train_tf, val_tf, verify=config.verify_images)


def _freeze_all_but_classifier(model: nn.Module) -> None:
    """Linear probing: only the parameters of ``model.get_classifier()`` keep ``requires_grad``."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    trainable = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
    if not trainable:
        raise UsageError(f"--linear-probe needs a model with a linear classifier, {type(model).__name__} has none")
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("linear probe: %d trainable parameters (the classifier), the rest frozen", count)


class _ProbeStandardiser:
    """Linear probing on standardised features: the classifier sees ``(f - mean) / std`` per feature, with the
    statistics of one pass of the frozen model over the training data (as MAE's linear probe, arXiv:2111.06377,
    appendix: BatchNorm without affine before the linear head, here with fixed statistics). Checkpoints hold the
    equivalent ordinary classifier ``W' = W / std``, ``b' = b - W' mean``, so they load and evaluate like any other."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean, self.std = mean, std

    @classmethod
    @torch.no_grad()
    def from_data(
        cls, model: nn.Module, loader: DataLoader, steps: int, device: torch.device, info: DistInfo, amp: str
    ) -> _ProbeStandardiser | None:
        head = model.get_classifier()
        if not isinstance(head, nn.Linear) or head.bias is None:
            log.info("linear probe: the classifier is not a linear layer with bias; features are not standardised")
            return None
        stats: list[torch.Tensor] = []

        def grab(_: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach().float().reshape(-1, args[0].shape[-1])
            row = torch.cat([x.new_tensor([x.shape[0]]), x.sum(0), x.pow(2).sum(0)])
            stats.append(row.double())

        handle = head.register_forward_pre_hook(grab)
        model.eval()
        try:
            for step, (images, _) in enumerate(loader):
                if step >= steps:
                    break
                with autocast(device, amp):
                    model(images.to(device))
        finally:
            handle.remove()
        total = torch.stack(stats).sum(0)
        if info.enabled:
            torch.distributed.all_reduce(total)
        n, dim = total[0], head.in_features
        mean = total[1 : 1 + dim] / n
        var = (total[1 + dim :] / n - mean.pow(2)).clamp_min(0.0)
        probe = cls(mean.float(), (var + 1e-6).sqrt().float())
        head.register_forward_pre_hook(probe._standardise)
        log.info("linear probe: classifier inputs standardised with statistics of %d training images", int(n))
        return probe

    def _standardise(self, _: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        x = args[0]
        return ((x - self.mean.to(x)) / self.std.to(x), *args[1:])

    @contextlib.contextmanager
    def folded(self, heads: list[nn.Module]):
        """Within the block, ``heads`` hold the classifier for raw (not standardised) features."""
        saved = self.head_states(heads)
        with torch.no_grad():
            for head in heads:
                weight = head.weight / self.std.to(head.weight)
                head.bias.sub_(weight @ self.mean.to(weight))
                head.weight.copy_(weight)
        try:
            yield
        finally:
            self.load_states(heads, saved)

    @staticmethod
    def head_states(heads: list[nn.Module]) -> list[dict[str, torch.Tensor]]:
        return [{k: v.detach().clone().cpu() for k, v in head.state_dict().items()} for head in heads]

    @staticmethod
    def load_states(heads: list[nn.Module], states: list[dict[str, torch.Tensor]]) -> None:
        for head, state in zip(heads, states, strict=True):
            head.load_state_dict(state)

    def load_heads(self, states: list[dict[str, torch.Tensor]], model: nn.Module, ema: nn.Module | None) -> None:
        heads = [m.get_classifier() for m in (model, ema) if m is not None]
        self.load_states(heads, states)


__all__ = ["REQUIRES", "ClassifyTask"]
