"""Self-supervised pretraining (QB-Heat or MAE): every knob a field of :class:`PretrainConfig`, run by the one fit loop
(:func:`pdevision.engine.loop.fit`) through the task :class:`pdevision.tasks.pretrain.task.PretrainTask`.

Single process, or data parallel under ``torchrun`` (gloo on CPU, nccl on GPU), like classification.
Rank 0 writes the run folder:

* ``last/``: the whole pretraining model (encoder, predictor or mask token, decoder) with ``trainer.pt``
  (optimizer, scaler, epoch, step, elapsed seconds, RNG states) for ``--resume``; meta ``kind: "pretrain"``;
* ``encoder/``: the backbone alone (no classifier), meta ``kind: "encoder"`` with the model name, its arguments,
  the image size, mean and std: ``pdevision train --init-from RUN/encoder`` fine-tunes it (new classifier),
  ``--linear-probe`` trains a linear classifier on it frozen, ``pdevision eval --checkpoint RUN/encoder`` reports
  k-NN accuracy of its features;
* ``metrics.csv`` (one row per epoch), ``config.json``, ``summary.json``, ``curves.png``, ``reconstructions.png``.

``encoder/`` is written before ``last/`` at every epoch, so a run killed while exporting resumes that epoch and
writes the export again. Schedule: AdamW (betas 0.9, 0.95), timm's cosine schedule with a linear warm-up (from
1% of the peak rate) over the first ``warmup`` fraction of training, and the cosine decay to ``min_lr`` counted
from the start of training (timm's default, as in supervised training). Training lasts ``epochs`` epochs of
``crops_per_epoch`` crops, or ``time_budget`` seconds of training steps (whichever ends first); with a time
budget the schedule follows the elapsed fraction of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pdevision.engine.config import RunConfig
from pdevision.errors import UsageError
from pdevision.models.mae import DEFAULT_MAE_ARGS, DEFAULT_MAE_MODEL, MAE
from pdevision.models.qbheat import QBHeat

log = logging.getLogger(__name__)

METHODS = ("qbheat", "mae")


def default_run() -> RunConfig:
    return RunConfig(output="runs/pretrain")


LR_PER_64 = 1e-3  # default learning rate for a global batch of 64, scaled linearly


@dataclass
class PretrainConfig:
    """All knobs of :func:`pretrain`: the method's, and the run's (:class:`RunConfig`)."""

    method: str = "qbheat"  # qbheat | mae
    model: str | None = None  # None: vheat_micro (qbheat), vit_tiny_patch16_224 with patch 8, depth 4 (mae);
    # QB-Heat takes any timm ViT (patch size = stride) or any backbone with forward_intermediates (e.g. resnet18)
    model_args: dict[str, Any] = field(default_factory=dict)
    data: str | None = None  # None: crops of scikit-image's sample photographs; an embedded set's name; a folder
    img_size: int = 64
    crops_per_epoch: int = 2048
    warmup: float = 0.05  # fraction of training
    # QB-Heat
    block_size: int | None = None  # None: half the image side (a quarter of the area)
    block_position: str = "center"  # center | random
    stride: int = 8
    pred_dim: int = 128
    predictor: str = "discrete"  # discrete | exact
    corner: str = "mean"  # mean | xy | yx
    constraint: str = "skew"  # skew | none
    max_rate: float | str | None = "auto"  # "auto": 0.25 for skew, no cap for none (the published form)
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
    verify_images: bool = True
    run: RunConfig = field(default_factory=default_run)

    def run_defaults(self) -> dict[str, Any]:
        """AdamW (0.9, 0.95) at 1e-3 per 64 images, 10 epochs, warm-up the ``warmup`` fraction of them; the loop
        keeps full batches, reseeds each rank (crops and masks differ) and lets DDP skip unused parameters."""
        epochs = self.run.epochs or 10
        return {
            "epochs": 10,
            "batch_size": 64,
            "lr_base": LR_PER_64,
            "lr_base_batch": 64,
            "opt": "adamw",
            "betas": (0.9, 0.95),
            "weight_decay": 0.05,
            "min_lr": 1e-5,
            "warmup_epochs": self.warmup * epochs,
            "rank_seed": True,
            "drop_last": True,
            "find_unused_parameters": True,
        }

    def encoder(self) -> tuple[str, dict[str, Any]]:
        """The encoder's model name and arguments, with the method's defaults filled in."""
        if self.method == "mae" and self.model is None:
            return DEFAULT_MAE_MODEL, {**DEFAULT_MAE_ARGS, **self.model_args}
        return self.model or "vheat_micro", dict(self.model_args)


def build_pretrainer(config: PretrainConfig) -> QBHeat | MAE:
    """The QB-Heat or MAE model that :func:`pretrain` trains. A plain ``ValueError`` of its constructor (a size,
    stride or block its encoder cannot take) is a :class:`~pdevision.errors.UsageError`: every argument it
    checks is one of the user's settings."""
    try:
        return _build_pretrainer(config)
    except ValueError as exc:
        if type(exc) is not ValueError:  # already a named error (model name, model arguments, usage)
            raise
        raise UsageError(str(exc)) from exc


def _build_pretrainer(config: PretrainConfig) -> QBHeat | MAE:
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
            raise UsageError("MAE decodes with mask tokens in a transformer decoder; --decoder conv is QB-Heat only")
        return MAE(name, mask_ratio=config.mask_ratio, **common)
    raise ValueError(f"pretraining method must be one of {METHODS}, got {config.method!r}")


__all__ = ["METHODS", "PretrainConfig", "build_pretrainer"]
