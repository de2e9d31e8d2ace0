"""Self-supervised pretraining (QB-Heat or MAE): one linear loop, every knob a field of :class:`PretrainConfig`.

Single process, or data parallel under ``torchrun`` (gloo on CPU, nccl on GPU), like :func:`pdevision.engine.train`.
Rank 0 writes the run folder:

* ``last/``: the whole pretraining model (encoder, predictor or mask token, decoder) with ``trainer.pt``
  (optimizer, scaler, epoch, step, elapsed seconds, RNG states) for ``--resume``; meta ``kind: "pretrain"``;
* ``encoder/``: the backbone alone (no classifier), meta ``kind: "encoder"`` with the model name, its arguments,
  the image size, mean and std: ``pdevision train --init-from RUN/encoder`` fine-tunes it (new classifier),
  ``--linear-probe`` trains a linear classifier on it frozen, ``pdevision eval --checkpoint RUN/encoder`` reports
  k-NN accuracy of its features;
* ``metrics.csv`` (one row per epoch), ``config.json``, ``summary.json``, ``reconstructions.png``.

Schedule: AdamW (betas 0.9, 0.95), linear warm-up over the first ``warmup`` fraction of training, then cosine
decay to ``min_lr``. Training lasts ``epochs`` epochs of ``crops_per_epoch`` crops, or ``time_budget`` seconds of
training steps (whichever ends first); with a time budget the schedule follows the elapsed fraction of it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch
from timm.optim import param_groups_weight_decay
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from pdevision.engine.checkpoint import (
    CheckpointError,
    load_trainer_state,
    load_weights,
    read_meta,
    resolve_checkpoint,
    save_checkpoint,
)
from pdevision.engine.distributed import DistInfo, all_reduce_sum, cleanup_distributed, init_distributed
from pdevision.engine.lock import RunLock
from pdevision.engine.runtime import (
    EpochSampler,
    autocast,
    optimizer_step,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
    write_metrics,
)
from pdevision.ssl.data import build_pretrain_dataset
from pdevision.ssl.mae import DEFAULT_MAE_ARGS, DEFAULT_MAE_MODEL, MAE
from pdevision.ssl.qbheat import QBHeat
from pdevision.ssl.visualize import save_reconstruction_grid

log = logging.getLogger(__name__)

METHODS = ("qbheat", "mae")
LR_PER_64 = 1e-3  # default learning rate for a global batch of 64, scaled linearly


@dataclass
class PretrainConfig:
    """All knobs of :func:`pretrain`."""

    method: str = "qbheat"  # qbheat | mae
    model: str | None = None  # None: vheat_micro (qbheat), vit_tiny_patch16_224 with patch 8, depth 4 (mae)
    model_args: dict[str, Any] = field(default_factory=dict)
    data: str | None = None  # None: crops of scikit-image's sample photographs
    output: str = "runs/pretrain"
    img_size: int = 64
    crops_per_epoch: int = 2048
    epochs: int = 10
    time_budget: float | None = None  # seconds of training steps; stops early and drives the schedule
    batch_size: int = 64  # per process
    lr: float | None = None  # absolute; None: 1e-3 x global batch / 64
    min_lr: float = 1e-5
    warmup: float = 0.05  # fraction of training
    weight_decay: float = 0.05
    clip_grad: float | None = None
    # QB-Heat
    block_size: int | None = None  # None: half the image side (a quarter of the area)
    block_position: str = "center"  # center | random
    stride: int = 8
    pred_dim: int = 128
    predictor: str = "discrete"  # discrete | exact
    corner: str = "mean"  # mean | xy | yx
    constraint: str = "skew"  # skew | none
    max_rate: float | None = 0.25
    fuse_deeper: bool = True
    decoder: str = "transformer"  # transformer | conv (MAE: transformer only)
    # MAE
    mask_ratio: float = 0.75
    # decoder and loss (both)
    decoder_width: int = 128
    decoder_depth: int = 2
    decoder_heads: int = 4
    loss_region: str = "unseen"  # unseen | all
    norm_pix: bool = True
    # runtime
    amp: str = "none"
    seed: int = 0
    deterministic: bool = False
    workers: int = 0
    device: str = "auto"
    resume: str | None = None
    stop_after_epochs: int | None = None
    max_train_batches: int | None = None
    progress: bool = True
    verify_images: bool = True

    def encoder(self) -> tuple[str, dict[str, Any]]:
        """The encoder's model name and arguments, with the method's defaults filled in."""
        if self.method == "mae" and self.model is None:
            return DEFAULT_MAE_MODEL, {**DEFAULT_MAE_ARGS, **self.model_args}
        return self.model or "vheat_micro", dict(self.model_args)


def build_pretrainer(config: PretrainConfig) -> QBHeat | MAE:
    """The QB-Heat or MAE model that :func:`pretrain` trains."""
    name, args = config.encoder()
    common = dict(
        img_size=config.img_size,
        decoder_width=config.decoder_width,
        decoder_depth=config.decoder_depth,
        decoder_heads=config.decoder_heads,
        loss_region=config.loss_region,
        norm_pix=config.norm_pix,
        encoder_args=args,
    )
    if config.method == "qbheat":
        return QBHeat(
            name,
            block_size=config.block_size,
            block_position=config.block_position,
            stride=config.stride,
            pred_dim=config.pred_dim,
            predictor=config.predictor,
            corner=config.corner,
            constraint=config.constraint,
            max_rate=config.max_rate,
            fuse_deeper=config.fuse_deeper,
            decoder=config.decoder,
            **common,
        )
    if config.method == "mae":
        if config.decoder != "transformer":
            raise ValueError("MAE decodes with mask tokens in a transformer decoder; --decoder conv is QB-Heat only")
        return MAE(name, mask_ratio=config.mask_ratio, **common)
    raise ValueError(f"pretraining method must be one of {METHODS}, got {config.method!r}")


def lr_at(progress: float, lr: float, min_lr: float, warmup: float) -> float:
    """Linear warm-up over ``[0, warmup)`` (from 1% of ``lr``), then cosine from ``lr`` to ``min_lr`` at 1."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return lr * max(progress / warmup, 0.01)
    t = (progress - warmup) / max(1.0 - warmup, 1e-12)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def pretrain(config: PretrainConfig) -> dict[str, Any]:
    """Pretrain ``config.model`` with QB-Heat or MAE and return the run summary (also in ``summary.json``)."""
    device = resolve_device(config.device)
    info = init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    try:
        with RunLock(config.output, enabled=info.is_main):
            return _pretrain(config, device, info)
    finally:
        cleanup_distributed(info)


def _check(config: PretrainConfig) -> None:
    if config.method not in METHODS:
        raise ValueError(f"pretraining method must be one of {METHODS}, got {config.method!r}")
    for name in ("batch_size", "crops_per_epoch", "epochs", "img_size"):
        if getattr(config, name) <= 0:
            raise ValueError(f"{name.replace('_', ' ')} must be a positive integer, got {getattr(config, name)}")
    if config.time_budget is not None and config.time_budget <= 0:
        raise ValueError(f"time budget must be positive seconds, got {config.time_budget}")
    if not 0.0 <= config.warmup < 1.0:
        raise ValueError(f"warm-up must be a fraction in [0, 1), got {config.warmup}")


def _pretrain(config: PretrainConfig, device: torch.device, info: DistInfo) -> dict[str, Any]:
    _check(config)
    seed_everything(config.seed, config.deterministic)
    run_dir = Path(config.output)
    model = build_pretrainer(config)
    torch.manual_seed(config.seed + 1000 * info.rank)  # crops and masks differ across ranks
    name, _ = config.encoder()
    data_cfg = timm.data.resolve_data_config({}, model=model.encoder)
    mean, std = list(data_cfg["mean"]), list(data_cfg["std"])
    dataset = build_pretrain_dataset(
        config.data, config.img_size, config.crops_per_epoch, mean, std, verify=config.verify_images
    )
    model.to(device)

    sampler: Sampler[int]
    if info.enabled:
        sampler = DistributedSampler(dataset, info.world_size, info.rank, shuffle=True, seed=config.seed)
    else:
        sampler = EpochSampler(len(dataset), config.seed)
    loader = DataLoader(
        dataset, batch_size=config.batch_size, sampler=sampler, num_workers=config.workers, drop_last=True
    )
    steps_per_epoch = len(loader) if config.max_train_batches is None else min(len(loader), config.max_train_batches)
    global_batch = config.batch_size * info.world_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"{config.crops_per_epoch} crops per epoch do not fill one global batch of {global_batch}; "
            "raise --crops-per-epoch or lower --batch-size"
        )
    lr = config.lr if config.lr is not None else LR_PER_64 * global_batch / 64
    params = param_groups_weight_decay(model, config.weight_decay, no_weight_decay_list=model.no_weight_decay())
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95))
    scaler = torch.amp.GradScaler("cuda", enabled=config.amp == "fp16")
    total_steps = config.epochs * steps_per_epoch

    encoder_args = {**model.encoder_args, "img_size": config.img_size}
    meta = {
        "kind": "pretrain",
        "method": config.method,
        "model": name,
        "img_size": config.img_size,
        "model_args": encoder_args,
        "mean": mean,
        "std": std,
    }
    encoder_meta = {**meta, "kind": "encoder"}

    start_epoch, num_updates, elapsed, history = 0, 0, 0.0, []
    if config.resume:
        folder = resolve_checkpoint(config.resume, prefer=("last",))
        old = read_meta(folder)
        if old.get("kind") != "pretrain":
            raise CheckpointError(f"{folder} is not a pretraining checkpoint (resume from RUN/last)")
        if (old.get("method"), old.get("model")) != (config.method, name):
            raise CheckpointError(
                f"checkpoint {folder} was pretrained with --method {old.get('method')} --model {old.get('model')}, "
                f"not --method {config.method} --model {name}"
            )
        try:
            model.load_state_dict(load_weights(folder))
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint {folder} does not fit this model (other --img-size or model arguments?): "
                f"{str(exc).splitlines()[0]}"
            ) from exc
        state = load_trainer_state(folder)
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        start_epoch, num_updates, elapsed = state["epoch"] + 1, state["num_updates"], state["elapsed"]
        history = state["history"]
        set_rng_state(state["rng"][info.rank] if info.rank < len(state["rng"]) else state["rng"][0])
        log.info("resumed from %s at epoch %d (%d steps, %.0f s)", folder, start_epoch, num_updates, elapsed)

    train_model: nn.Module = model
    if info.enabled:
        # a backbone may hold parameters that pretraining does not use (e.g. a pre-classifier norm)
        train_model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True
        )
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2, default=str))
        log.info(
            "%s pretraining of %s: encoder %.2fM parameters, predictor/decoder %.2fM; %d steps of %d per epoch",
            config.method,
            name,
            count_params(model.encoder) / 1e6,
            (count_params(model) - count_params(model.encoder)) / 1e6,
            steps_per_epoch,
            global_batch,
        )

    def spent() -> float:
        if not info.enabled:
            return elapsed
        return all_reduce_sum([elapsed], info, device)[0] / info.world_size

    budget = config.time_budget
    stop = config.epochs if config.stop_after_epochs is None else min(config.epochs, config.stop_after_epochs)
    status = "completed"
    out_of_time = budget is not None and spent() >= budget
    for epoch in range(start_epoch, stop):
        if out_of_time:
            break
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        train_model.train()
        loss_sum, seen, epoch_seconds = 0.0, 0.0, 0.0
        bar = tqdm(
            total=steps_per_epoch,
            desc=f"{config.method} epoch {epoch + 1}/{config.epochs}",
            disable=not (config.progress and info.is_main),
            leave=False,
        )
        tick = time.perf_counter()
        for step, (images, _) in enumerate(loader):
            if step >= steps_per_epoch:
                break
            progress = num_updates / total_steps
            if budget is not None:
                progress = spent() / budget
                if progress >= 1.0:
                    out_of_time = True
                    break
            lr_now = lr_at(progress, lr, config.min_lr, config.warmup)
            for group in optimizer.param_groups:
                group["lr"] = lr_now
            images = images.to(device)
            with autocast(device, config.amp):
                loss = train_model(images)["loss"]
            where = f"pretraining loss at epoch {epoch + 1}, step {step + 1}"
            optimizer_step(loss, model, optimizer, scaler, config.clip_grad, where, run_dir)
            num_updates += 1
            loss_sum += loss.item() * images.shape[0]
            seen += images.shape[0]
            now = time.perf_counter()
            elapsed += now - tick
            epoch_seconds += now - tick
            tick = now
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}", img_s=f"{seen / max(epoch_seconds, 1e-9):.0f}")
            bar.update(1)
        bar.close()
        loss_sum, seen = all_reduce_sum([loss_sum, seen], info, device)
        if seen == 0:
            break
        row = {
            "epoch": epoch + 1,
            "steps": num_updates,
            "lr": optimizer.param_groups[0]["lr"],
            "loss": loss_sum / seen,
            "images_per_s": seen / max(epoch_seconds, 1e-9),
            "seconds": elapsed,
        }
        history.append(row)
        (log.info if info.is_main else log.debug)(
            "epoch %d/%d  loss %.4f  lr %.2e  %.0f img/s  %d steps, %.0f s",
            epoch + 1,
            config.epochs,
            row["loss"],
            row["lr"],
            row["images_per_s"],
            num_updates,
            elapsed,
        )
        rng = [rng_state()]
        if info.enabled:
            gathered: list[Any] = [None] * info.world_size
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        if info.is_main:
            write_metrics(run_dir / "metrics.csv", history)
            trainer_state = {
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": epoch,
                "num_updates": num_updates,
                "elapsed": elapsed,
                "history": history,
                "rng": rng,
            }
            epoch_meta = {"epoch": epoch + 1, "loss": row["loss"], "steps": num_updates}
            save_checkpoint(run_dir, "last", model, {**meta, **epoch_meta}, trainer_state)
            save_checkpoint(run_dir, "encoder", model.encoder, {**encoder_meta, **epoch_meta})
    if out_of_time:
        status = f"time budget of {budget:.0f} s spent"
    elif history and history[-1]["epoch"] < config.epochs:
        status = f"stopped after epoch {history[-1]['epoch']} of {config.epochs}"
    summary = {
        "method": config.method,
        "model": name,
        "model_args": encoder_args,
        "status": status,
        "epochs_run": len(history),
        "steps": num_updates,
        "images_seen": num_updates * global_batch,
        "seconds": elapsed,
        "final_loss": history[-1]["loss"] if history else None,
        "encoder_params": count_params(model.encoder),
        "pretrain_head_params": count_params(model) - count_params(model.encoder),
        "world_size": info.world_size,
        "encoder": str(run_dir / "encoder"),
    }
    if info.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        if history:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                images = torch.stack([dataset[i][0] for i in range(6)]).to(device)
            model.eval()
            save_reconstruction_grid(
                {config.method: model.reconstruct(images)}, mean, std, run_dir / "reconstructions.png"
            )
    return summary


__all__ = ["METHODS", "PretrainConfig", "build_pretrainer", "lr_at", "pretrain"]
