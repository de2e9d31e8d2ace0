"""Supervised training: one linear loop, every knob a field of :class:`TrainConfig`.

Single process, or data parallel under ``torchrun`` (gloo on CPU, nccl on GPU). Rank 0 writes the
run folder: ``metrics.csv`` (one row per epoch), TensorBoard events when tensorboard is installed,
``last/`` and ``best/`` checkpoints (see :mod:`pdevision.engine.checkpoint`), ``summary.json`` and
``curves.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import param_groups_weight_decay
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from pdevision.data import RECIPES, build_datasets, build_transforms
from pdevision.engine.checkpoint import (
    CheckpointError,
    load_trainer_state,
    load_weights,
    read_meta,
    resolve_checkpoint,
    save_checkpoint,
)
from pdevision.engine.distributed import (
    DistInfo,
    all_reduce_sum,
    cleanup_distributed,
    init_distributed,
    parameters_identical_across_ranks,
)
from pdevision.engine.lock import RunLock
from pdevision.engine.modeling import build_model, check_image_size, load_into_model
from pdevision.engine.runtime import (
    EpochSampler,
    NonFiniteLossError,
    autocast,
    optimizer_step,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
    write_metrics,
)

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """All knobs of :func:`train`. ``None`` means: take the value from ``recipe``."""

    model: str = "vheat_micro"
    data: str | None = None  # None: the embedded digits
    output: str = "runs/train"
    recipe: str = "light"
    epochs: int | None = None
    batch_size: int = 64  # per process
    img_size: int | None = None  # None: 64 for the digits, the model's default otherwise
    lr: float | None = None  # absolute; None: recipe lr * global batch / 512
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
    grad_checkpointing: bool = False
    seed: int = 0
    deterministic: bool = False
    workers: int = 0
    val_split: float = 0.2
    verify_images: bool = True
    resume: str | None = None  # a checkpoint folder or run folder
    init_from: str | None = None  # weights to start from (fine-tuning); an encoder checkpoint gets a new head
    reset_head: bool = False  # with init_from: replace the classifier
    linear_probe: bool = False  # freeze everything but the classifier (kept in eval mode), train the classifier
    device: str = "auto"
    stop_after_epochs: int | None = None  # stop (as if interrupted) after this many epochs of the schedule
    max_train_batches: int | None = None  # per epoch, for smoke runs
    progress: bool = True
    model_args: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> dict[str, Any]:
        """The configuration with every recipe default filled in."""
        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}; choose one of {sorted(RECIPES)}")
        recipe = RECIPES[self.recipe]
        out = dataclasses.asdict(self)
        for key in (
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
        ):
            if out[key] is None:
                out[key] = getattr(recipe, key)
        if self.no_ema:
            out["ema_decay"] = None
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
    """Loss, top-1 and top-5 accuracy over ``dataset`` (sharded across ranks, sums reduced), with
    predictions and targets of this rank for per-class statistics, and images/s."""
    model.eval()
    indices = list(range(info.rank, len(dataset), info.world_size))
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
        k = min(5, logits.shape[1])
        topk = logits.topk(k, dim=1).indices
        top1 += (topk[:, 0] == labels).sum().item()
        top5 += (topk == labels[:, None]).any(dim=1).sum().item()
        n += labels.numel()
        preds.append(topk[:, 0].cpu())
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


def _plot_curves(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(epochs, [h["train_loss"] for h in history], label="train")
    ax1.plot(epochs, [h["val_loss"] for h in history], label="val")
    ax1.set(xlabel="epoch", ylabel="loss", title="loss")
    ax1.legend()
    ax2.plot(epochs, [h["train_top1"] for h in history], label="train")
    ax2.plot(epochs, [h["val_top1"] for h in history], label="val")
    if any(h.get("val_top1_ema") is not None for h in history):
        ax2.plot(epochs, [h.get("val_top1_ema") for h in history], label="val (EMA)")
    ax2.set(xlabel="epoch", ylabel="top-1 accuracy (%)", title="accuracy")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        log.info("tensorboard is not installed; no event files written")
        return None
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))


def train(config: TrainConfig) -> dict[str, Any]:
    """Train ``config.model`` and return the run summary (also written to ``summary.json``)."""
    cfg = config.resolved()
    device = resolve_device(config.device)
    info = init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    try:
        with RunLock(config.output, enabled=info.is_main):
            return _train(config, cfg, device, info)
    finally:
        cleanup_distributed(info)


def _train(config: TrainConfig, cfg: dict[str, Any], device: torch.device, info: DistInfo) -> dict[str, Any]:
    if config.batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {config.batch_size}")
    seed_everything(config.seed, config.deterministic)
    run_dir = Path(config.output)
    img_size = (config.img_size or 64) if config.data is None else config.img_size

    # model (built first: its default resolution and normalisation set the transforms)
    init_meta = read_meta(config.init_from) if config.init_from else None
    init_kind = (init_meta or {}).get("kind")
    if init_kind == "pretrain":
        folder = resolve_checkpoint(str(config.init_from))
        raise CheckpointError(
            f"{folder} is a pretraining state (encoder, predictor, decoder); fine-tune its backbone with "
            f"--init-from {folder.parent / 'encoder'}"
        )
    from_encoder = init_kind == "encoder"  # backbone written by `pdevision pretrain`: no classifier
    model_args = dict(config.model_args)
    if from_encoder:
        assert init_meta is not None
        stored = init_meta.get("model_args", {})
        model_args = {**{k: v for k, v in stored.items() if k not in ("img_size", "drop_path_rate")}, **model_args}
        img_size = config.img_size or int(init_meta["img_size"])
    if config.drop_path is not None:
        model_args["drop_path_rate"] = config.drop_path
    recipe = RECIPES[cfg["recipe"]]
    recipe = dataclasses.replace(
        recipe,
        **{k: cfg[k] for k in ("auto_augment", "mixup", "cutmix", "label_smoothing", "re_prob", "hflip")},
    )
    probe = build_model(config.model, num_classes=1, img_size=img_size, **model_args)
    data_cfg = timm.data.resolve_data_config({}, model=probe)
    img_size = img_size or int(data_cfg["input_size"][-1])
    check_image_size(probe, img_size)
    del probe
    train_tf, val_tf = build_transforms(recipe, img_size, data_cfg["mean"], data_cfg["std"])
    train_set, val_set = build_datasets(
        config.data, img_size, config.val_split, train_tf, val_tf, verify=config.verify_images
    )
    classes = list(train_set.classes)
    skipped = sorted(set(getattr(train_set, "skipped", [])) | set(getattr(val_set, "skipped", [])))

    model = build_model(config.model, num_classes=len(classes), img_size=img_size, **model_args)
    if init_meta is not None:
        reset_head = config.reset_head or from_encoder
        load_into_model(model, config.init_from, config.model, classes, reset_head=reset_head)
    if config.linear_probe:
        _freeze_all_but_classifier(model)
    if config.grad_checkpointing:
        model.set_grad_checkpointing(True)
    model.to(device)
    meta = {
        "model": config.model,
        "classes": classes,
        "img_size": img_size,
        "model_args": {**model_args, "img_size": img_size},
        "mean": list(data_cfg["mean"]),
        "std": list(data_cfg["std"]),
    }

    # data loaders
    sampler: Sampler[int]
    if info.enabled:
        sampler = DistributedSampler(train_set, info.world_size, info.rank, shuffle=True, seed=config.seed)
    else:
        sampler = EpochSampler(len(train_set), config.seed)
    loader = DataLoader(
        train_set,
        batch_size=config.batch_size,
        sampler=sampler,
        num_workers=config.workers,
        drop_last=len(train_set) >= config.batch_size * info.world_size * 2,
        persistent_workers=False,
    )
    steps_per_epoch = len(loader) if config.max_train_batches is None else min(len(loader), config.max_train_batches)

    # optimisation
    global_batch = config.batch_size * info.world_size
    lr = config.lr if config.lr is not None else recipe.lr * global_batch / 512
    no_decay = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    params = param_groups_weight_decay(model, cfg["weight_decay"], no_weight_decay_list=no_decay)
    optimizer = torch.optim.AdamW(params, lr=lr)
    epochs = int(cfg["epochs"])
    scheduler, _ = create_scheduler_v2(
        optimizer,
        sched="cosine",
        num_epochs=epochs,
        warmup_epochs=int(cfg["warmup_epochs"]),
        min_lr=cfg["min_lr"],
        warmup_lr=lr * 0.01,
        step_on_epochs=False,
        updates_per_epoch=steps_per_epoch,
    )
    scaler = torch.amp.GradScaler("cuda", enabled=config.amp == "fp16")
    probe = None
    if config.linear_probe:  # before the EMA copy, which must standardise its classifier's input too
        probe = _ProbeStandardiser.from_data(model, loader, steps_per_epoch, device, info, config.amp)
    ema = ModelEmaV3(model, decay=cfg["ema_decay"]) if cfg["ema_decay"] else None
    mixup = None
    if cfg["mixup"] > 0 or cfg["cutmix"] > 0:
        mixup = Mixup(
            mixup_alpha=cfg["mixup"],
            cutmix_alpha=cfg["cutmix"],
            label_smoothing=cfg["label_smoothing"],
            num_classes=len(classes),
        )
        criterion: nn.Module = SoftTargetCrossEntropy()
    else:
        criterion = nn.CrossEntropyLoss(label_smoothing=cfg["label_smoothing"])

    # resume
    start_epoch, best_top1, history = 0, -1.0, []
    if config.resume:
        folder = resolve_checkpoint(config.resume, prefer=("last",))
        if read_meta(folder).get("kind") in ("pretrain", "encoder"):
            raise CheckpointError(
                f"{folder} is a pretraining checkpoint; resume it with `pdevision pretrain --resume`, "
                "or start training from it with --init-from RUN/encoder"
            )
        state = load_trainer_state(folder)
        load_into_model(model, folder, config.model, classes)
        if ema is not None:
            ema.module.load_state_dict(load_weights(folder, ema=True))
        if probe is not None:  # the checkpoint holds the folded classifier; continue from the trained one
            probe.load_heads(state["probe_heads"], model, ema.module if ema else None)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        start_epoch, best_top1, history = state["epoch"] + 1, state["best_top1"], state["history"]
        set_rng_state(state["rng"][info.rank] if info.rank < len(state["rng"]) else state["rng"][0])
        log.info("resumed from %s at epoch %d", folder, start_epoch)

    train_model: nn.Module = model
    if info.enabled:
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    writer = None
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
        writer = _tensorboard(run_dir)
    stop = epochs if config.stop_after_epochs is None else min(epochs, config.stop_after_epochs)
    num_updates = start_epoch * steps_per_epoch
    status = "completed"
    for epoch in range(start_epoch, stop):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        train_model.train()
        if config.linear_probe:  # the frozen backbone keeps its norm statistics, no dropout or drop path
            model.eval()
            model.get_classifier().train()
        loss_sum, correct, seen = 0.0, 0.0, 0.0
        start = time.perf_counter()
        bar = tqdm(
            total=steps_per_epoch,
            desc=f"epoch {epoch + 1}/{epochs}",
            disable=not (config.progress and info.is_main),
            leave=False,
        )
        for step, (images, labels) in enumerate(loader):
            if step >= steps_per_epoch:
                break
            images, labels = images.to(device), labels.to(device)
            hard_labels = labels
            if mixup is not None:
                images, labels = mixup(images, labels)
            with autocast(device, config.amp):
                logits = train_model(images)
                loss = criterion(logits.float(), labels)
            where = f"training loss at epoch {epoch + 1}, step {step + 1}"
            optimizer_step(loss, model, optimizer, scaler, cfg["clip_grad"], where, run_dir)
            num_updates += 1
            scheduler.step_update(num_updates)
            if ema is not None:
                ema.update(model, step=num_updates)
            loss_sum += loss.item() * images.shape[0]
            correct += (logits.argmax(1) == hard_labels).sum().item()
            seen += images.shape[0]
            bar.set_postfix(
                loss=f"{loss_sum / seen:.3f}",
                acc=f"{100 * correct / seen:.1f}",
                img_s=f"{seen / (time.perf_counter() - start):.0f}",
            )
            bar.update(1)
        bar.close()
        elapsed = time.perf_counter() - start
        loss_sum, correct, seen = all_reduce_sum([loss_sum, correct, seen], info, device)
        val = evaluate_model(model, val_set, config.batch_size, device, info, config.amp, config.workers)
        val_ema = (
            evaluate_model(ema.module, val_set, config.batch_size, device, info, config.amp, config.workers)
            if ema is not None
            else None
        )
        row = {
            "epoch": epoch + 1,
            "lr": optimizer.param_groups[0]["lr"],
            "train_loss": loss_sum / max(seen, 1),
            "train_top1": 100 * correct / max(seen, 1),
            "train_images_per_s": seen / max(elapsed, 1e-9),
            "val_loss": val["loss"],
            "val_top1": val["top1"],
            "val_top5": val["top5"],
            "val_top1_ema": val_ema["top1"] if val_ema else None,
            "epoch_seconds": elapsed,
        }
        history.append(row)
        score = max(val["top1"], val_ema["top1"] if val_ema else -1.0)
        improved = score > best_top1
        best_top1 = max(best_top1, score)
        (log.info if info.is_main else log.debug)(
            "epoch %d/%d  train loss %.4f acc %.2f%%  val loss %.4f top1 %.2f%% top5 %.2f%%%s  %.0f img/s",
            epoch + 1,
            epochs,
            row["train_loss"],
            row["train_top1"],
            val["loss"],
            val["top1"],
            val["top5"],
            f" (EMA {val_ema['top1']:.2f}%)" if val_ema else "",
            row["train_images_per_s"],
        )
        rng = [rng_state()]
        if info.enabled:
            gathered: list[Any] = [None] * info.world_size
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        if info.is_main:
            write_metrics(run_dir / "metrics.csv", history)
            if writer is not None:
                for key, value in row.items():
                    if key != "epoch" and value is not None:
                        writer.add_scalar(key, value, epoch + 1)
                writer.flush()
            trainer_state = {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": epoch,
                "sampler_epoch": epoch + 1,
                "best_top1": best_top1,
                "history": history,
                "rng": rng,
            }
            epoch_meta = {**meta, "epoch": epoch + 1, "val_top1": val["top1"]}
            heads = [m.get_classifier() for m in (model, ema.module if ema else None) if m is not None]
            folded = probe.folded(heads) if probe is not None else contextlib.nullcontext()
            if probe is not None:
                trainer_state["probe_heads"] = probe.head_states(heads)
            with folded:  # checkpoints hold an ordinary classifier
                save_checkpoint(run_dir, "last", model, epoch_meta, trainer_state, ema.module if ema else None)
                if improved:
                    # best: the better of model and EMA, stored as the model weights
                    best_model = ema.module if val_ema and val_ema["top1"] > val["top1"] else model
                    save_checkpoint(run_dir, "best", best_model, {**epoch_meta, "val_top1": score})
    if stop < epochs:
        status = f"stopped after epoch {stop} of {epochs}"
    identical = parameters_identical_across_ranks(model, info, device)
    summary = {
        "model": config.model,
        "status": status,
        "epochs_run": len(history),
        "best_val_top1": best_top1,
        "final": history[-1] if history else None,
        "classes": classes,
        "train_images": len(train_set),
        "val_images": len(val_set),
        "skipped_images": skipped,
        "world_size": info.world_size,
        "ranks_identical": identical,
        "img_size": img_size,
        "seconds": sum(h["epoch_seconds"] for h in history),
    }
    if info.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        if history:
            _plot_curves(history, run_dir / "curves.png")
        if writer is not None:
            writer.close()
    return summary


def _freeze_all_but_classifier(model: nn.Module) -> None:
    """Linear probing: only the parameters of ``model.get_classifier()`` keep ``requires_grad``."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    trainable = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
    if not trainable:
        raise ValueError(f"--linear-probe needs a model with a linear classifier, {type(model).__name__} has none")
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


__all__ = [
    "CheckpointError",
    "NonFiniteLossError",
    "TrainConfig",
    "evaluate_model",
    "optimizer_step",
    "train",
    "write_metrics",
]
