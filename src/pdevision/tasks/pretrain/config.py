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

from pdevision.engine import validators as V
from pdevision.engine.config import Flag, RunConfig, setting
from pdevision.errors import UsageError
from pdevision.models.mae import DEFAULT_MAE_ARGS, DEFAULT_MAE_MODEL, MAE
from pdevision.models.qbheat import QBHeat

log = logging.getLogger(__name__)

METHODS = ("qbheat", "mae")


def default_run() -> RunConfig:
    return RunConfig(output="runs/pretrain")


LR_PER_64 = 1e-3  # default learning rate for a global batch of 64, scaled linearly


def parse_max_rate(text: str) -> float | str | None:
    """``--max-rate``: ``auto``, ``none`` (no cap) or a positive number."""
    return text if text == "auto" else V.rate(text)


# the groups of the flags
METHOD_GROUP = "pretraining: method, data and model"
QBHEAT_GROUP = "QB-Heat"
MAE_GROUP = "MAE"
DECODER_GROUP = "decoder and loss"


@dataclass
class PretrainConfig:
    """All knobs of :func:`pretrain`: the method's, and the run's (:class:`RunConfig`).

    Each field with a :class:`~pdevision.engine.config.Flag` is a flag of ``pdevision pretrain`` (in field order, in
    its flag's group), made from the field by :func:`pdevision.tasks.args.add_config_arguments`."""

    method: str = setting("qbheat", None, Flag(METHOD_GROUP, "default: qbheat", choices=METHODS))
    # None: vheat_micro (qbheat), vit_tiny_patch16_224 with patch 8, depth 4 (mae);
    # QB-Heat takes any timm ViT (patch size = stride) or any backbone with forward_intermediates (e.g. resnet18)
    model: str | None = setting(
        None, None, Flag(METHOD_GROUP, "backbone (default: vheat_micro; mae: vit_tiny_patch16_224, patch 8, depth 4)")
    )
    model_args: dict[str, Any] = setting(  # noqa: RUF009  (a dataclasses.field with a default_factory)
        factory=dict, type=V.json_dict, flag=Flag(METHOD_GROUP, "JSON model arguments, e.g. '{\"depth\": 4}'")
    )
    # None: crops of scikit-image's sample photographs; an embedded set's name; a folder
    data: str | None = setting(
        None,
        V.path,
        Flag(
            METHOD_GROUP,
            "ImageFolder root or an embedded set (digits, scenes: its train split), labels unused; "
            "default: scikit-image photos",
        ),
    )
    img_size: int = setting(64, V.side, Flag(METHOD_GROUP, "crop side in pixels (default 64)"))
    crops_per_epoch: int = setting(2048, V.per_epoch, Flag(METHOD_GROUP))
    warmup: float = setting(  # fraction of training
        0.05, V.rate_below_one, Flag(METHOD_GROUP, "warm-up fraction of training (0.05)")
    )
    verify_images: bool = setting(True, None, Flag(METHOD_GROUP, "skip the decode check", name="--no-verify-images"))
    block_size: int | None = setting(  # None: half the image side (a quarter of the area)
        None, V.side, Flag(QBHEAT_GROUP, "visible block side (default: half)")
    )
    block_position: str = setting("center", None, Flag(QBHEAT_GROUP, choices=("center", "random")))
    stride: int = setting(8, V.count, Flag(QBHEAT_GROUP, "feature stride of the prediction (default 8)"))
    pred_dim: int = setting(128, V.width, Flag(QBHEAT_GROUP, "channels of the predicted features"))
    predictor: str = setting(
        "discrete", None, Flag(QBHEAT_GROUP, "(I + dx A)^n or expm", choices=("discrete", "exact"))
    )
    corner: str = setting(
        "mean", None, Flag(QBHEAT_GROUP, "order of the corner extrapolation", choices=("mean", "xy", "yx"))
    )
    constraint: str = setting("skew", None, Flag(QBHEAT_GROUP, "A, B skew-symmetric or free", choices=("skew", "none")))
    # "auto": 0.25 for skew, no cap for none (the published form)
    max_rate: float | str | None = setting(
        "auto",
        parse_max_rate,
        Flag(
            QBHEAT_GROUP,
            "cap on dx ||A||_2 ('none': no cap; default 'auto': 0.25 for skew, none for --constraint none)",
        ),
    )
    fuse_deeper: bool = setting(True, None, Flag(QBHEAT_GROUP, "only the stride's stage", name="--no-fuse-deeper"))
    decoder: str = setting(  # transformer | conv (MAE: transformer only)
        "transformer", None, Flag(QBHEAT_GROUP, choices=("transformer", "conv"))
    )
    mask_ratio: float = setting(0.75, V.open_fraction, Flag(MAE_GROUP))
    # both methods
    decoder_width: int = setting(128, V.width, Flag(DECODER_GROUP))
    decoder_depth: int = setting(2, V.count, Flag(DECODER_GROUP))
    decoder_heads: int = setting(4, V.count, Flag(DECODER_GROUP))
    loss_region: str = setting(
        "unseen", None, Flag(DECODER_GROUP, "hidden cells or whole image", choices=("unseen", "all"))
    )
    norm_pix: bool = setting(True, None, Flag(DECODER_GROUP, "raw instead of per-patch pixels", name="--no-norm-pix"))
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


def create_pretrainer(config: PretrainConfig) -> QBHeat | MAE:
    """The QB-Heat or MAE model that :func:`pretrain` trains. A plain ``ValueError`` of its constructor (a size,
    stride or block its encoder cannot take) is a :class:`~pdevision.errors.UsageError`: every argument it
    checks is one of the user's settings."""
    try:
        return _create_pretrainer(config)
    except ValueError as exc:
        if type(exc) is not ValueError:  # already a named error (model name, model arguments, usage)
            raise
        raise UsageError(str(exc)) from exc


def _create_pretrainer(config: PretrainConfig) -> QBHeat | MAE:
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


__all__ = ["METHODS", "PretrainConfig", "create_pretrainer"]
