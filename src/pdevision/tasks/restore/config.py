"""The restoration tasks' settings: :class:`RestoreConfig` (its fields with a Flag are the flags of ``train --task
denoise`` / ``dejpeg``), the noise levels, the run defaults of a restoration run."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from pdevision.data.restoration import (
    Degradation,
)
from pdevision.engine import validators as V
from pdevision.engine.config import Flag, RunConfig, setting
from pdevision.errors import UsageError

# optional packages (module, extra) that training and evaluation need: checked before a run starts
REQUIRES = (("skimage", "restore"), ("matplotlib", "train"))  # PSNR / SSIM; curves

RESTORE_TASKS = ("denoise", "dejpeg")
DEFAULT_BASELINES = ("noisy", "nlm", "wavelet", "tv", "bm3d")


MAX_SIGMA = 255.0  # the noise level is on the 0-255 scale of 8-bit images


def parse_sigma(text: str | float) -> float | tuple[float, float]:
    """``"25"`` -> 25.0; ``"0-55"`` or ``"0:55"`` -> a blind range ``(0.0, 55.0)``. Levels must be finite,
    in [0, 255]."""
    if isinstance(text, (int, float)):
        text = str(text)
    for sep in ("-", ":"):
        if sep in text.strip().lstrip("-"):
            low, high = text.split(sep, 1)
            try:
                out = (float(low), float(high))
            except ValueError:
                break
            if not (all(math.isfinite(v) for v in out) and 0 <= out[0] <= out[1] <= MAX_SIGMA and out[1] > 0):
                raise UsageError(f"a blind sigma range needs 0 <= low <= high <= 255 and high > 0, got {text!r}")
            return out
    try:
        value = float(text)
    except ValueError as exc:
        raise UsageError(f"sigma must be a number (e.g. 25) or a range (e.g. 0-55), got {text!r}") from exc
    if not (math.isfinite(value) and 0 <= value <= MAX_SIGMA):
        raise UsageError(f"sigma must be in [0, 255] (the 0-255 scale), got {text!r}")
    if value == 0:  # nothing to remove: the held-out PSNR of the noisy input is infinite and the run stops
        raise UsageError("a fixed sigma must be above 0 (a blind range such as 0-55 may start at 0)")
    return value


def default_run() -> RunConfig:
    return RunConfig(output="runs/train")


# the run settings of a restoration run left at None (a short run on a CPU: 300 s of training)
RESTORE_RUN_DEFAULTS: dict[str, Any] = {
    "epochs": 2,
    "batch_size": 16,
    "lr": 2e-3,
    "opt": "adamw",
    "weight_decay": 0.0,
    "min_lr": 1e-5,
    "warmup_epochs": 0.0,
    "time_budget": 300.0,
    "rank_seed": True,  # patches are drawn from torch's generator: each rank its own
}


def _sigma(text: str) -> float | tuple[float, float]:
    """``--sigma``: :func:`parse_sigma`, its refusal an argparse error."""
    try:
        return parse_sigma(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# the group of a restoration task's flags; {task}: denoise or dejpeg (RestoreCommands.add_arguments)
DATA_AND_MODEL = "{task}: data and model"


@dataclass
class RestoreConfig:
    """A restoration run: the task's settings and the run's (:class:`RunConfig`, defaults
    :data:`RESTORE_RUN_DEFAULTS`). Each field with a :class:`~pdevision.engine.config.Flag` is a flag of
    ``train --task denoise|dejpeg`` (``--sigma`` of denoise only, ``--quality`` of dejpeg only)."""

    task: str = "denoise"  # denoise | dejpeg
    model: str = setting(
        "vheatir_micro", None, Flag(DATA_AND_MODEL, "vheatir_*, swinir_* or dncnn_* (default vheatir_micro)")
    )
    model_args: dict[str, Any] = setting(  # noqa: RUF009  (a dataclasses.field with a default_factory)
        factory=dict, type=V.json_dict, flag=Flag(DATA_AND_MODEL, "JSON model arguments")
    )
    data: str | None = setting(None, V.path, Flag(DATA_AND_MODEL, "folder of clean training images (default: photos)"))
    val_data: str | None = setting(None, V.path, Flag(DATA_AND_MODEL, "folder of held-out clean images (e.g. Set12)"))
    # a restoration checkpoint of the same model and mode to start from (fine-tuning)
    init_from: str | None = setting(None, V.path, Flag(DATA_AND_MODEL, "a restoration checkpoint of the same network"))
    sigma: float | tuple[float, float] = setting(
        25.0, _sigma, Flag(DATA_AND_MODEL, "noise level on 0-255 (15, 25, 50) or a range 0-55")
    )
    quality: int = setting(10, V.bounded(int, 1, 100), Flag(DATA_AND_MODEL, "JPEG quality (default 10)"))
    # grey by default (the papers' grey denoising setting)
    color: bool = setting(False, None, Flag(DATA_AND_MODEL, "colour images (default grey); PSNR/SSIM on Y"))
    patch_size: int = setting(32, V.bounded(int, 8, 1024), Flag(DATA_AND_MODEL, "training patch side (32)"))
    patches_per_epoch: int = setting(16384, V.per_epoch, Flag(DATA_AND_MODEL, "default 16384"))
    loss: str = setting("l1", None, Flag(DATA_AND_MODEL, "default l1", choices=("l1", "charbonnier")))
    charbonnier_eps: float = 1e-3
    baselines: tuple[str, ...] = setting(
        DEFAULT_BASELINES,
        None,
        Flag(
            DATA_AND_MODEL,
            "classical baselines (default: noisy nlm wavelet tv bm3d)",
            choices=DEFAULT_BASELINES,
            nargs="*",
        ),
    )
    tile: int = 512
    overlap: int = 32
    eval_crop: int | None = None  # None: held-out images at full size; else their centre crop of this side
    run: RunConfig = field(default_factory=default_run)

    def degradation(self) -> Degradation:
        if self.task == "denoise":
            return Degradation("noise", sigma=self.sigma)
        if self.task == "dejpeg":
            return Degradation("jpeg", quality=self.quality)
        raise ValueError(f"unknown restoration task {self.task!r}; choose from {', '.join(RESTORE_TASKS)}")


MIN_HELD_OUT_SIDE = 7  # the window of the held-out SSIM
