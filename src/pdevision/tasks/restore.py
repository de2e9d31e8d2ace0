"""Image restoration tasks for the one fit loop: ``denoise`` (Gaussian noise) and ``dejpeg`` (JPEG artefacts).

Training follows the papers' patch training (DnCNN, SwinIR): random patches of the clean training
photographs, flipped/rotated, degraded on the fly, an L1 loss (or Charbonnier, ``sqrt(d^2 + eps^2)``)
between the network's output and the clean patch. Evaluation restores each held-out image at full
size (tiled with overlap above ``tile`` pixels a side) with a fixed seeded degradation per image, and
reports PSNR and SSIM (Y channel for colour, see :mod:`pdevision.data.restoration`); the classical
baselines run once on the same degraded images. ``best/`` is picked by PSNR.

:func:`restore_image` and :func:`restore_file` apply a trained checkpoint to any image.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

from pdevision._optional import require_all
from pdevision.data.datasets import DataError
from pdevision.data.imageio import read_image_native
from pdevision.data.restoration import (
    MODES,
    Degradation,
    PatchDataset,
    RestorationImages,
    classical_baselines,
    psnr,
    restoration_images,
    ssim,
    to_tensor,
)
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import CheckpointError, checkpoint_kind, load_weights, read_meta
from pdevision.engine.config import Flag, RunConfig, setting
from pdevision.engine.loop import fit
from pdevision.engine.modeling import check_finite_weights, load_checkpoint_model
from pdevision.engine.runtime import one_line, resolve_device
from pdevision.engine.task import Task
from pdevision.errors import UsageError
from pdevision.fastpath import on_device
from pdevision.models.factory import MAX_SIZE
from pdevision.models.restoration import build_restoration_model
from pdevision.tasks import args as A
from pdevision.tasks.registry import DEVICE_HELP, CheckpointOptions, Command, TaskCommands, register, register_command

log = logging.getLogger(__name__)

# optional packages (module, extra) that training and evaluation need: checked before a run starts
REQUIRES = (("skimage", "restore"), ("matplotlib", "train"))  # PSNR / SSIM; curves

__all__ = [
    "RESTORE_TASKS",
    "HeldOutImages",
    "RestoreConfig",
    "RestoreTask",
    "load_restoration_model",
    "parse_sigma",
    "restore_file",
    "restore_image",
    "train",
]

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


class HeldOutImages(Dataset):
    """Held-out images at full size (or their centre ``crop``) with one fixed degradation each (seed
    ``1000 + index``): item ``i`` is ``(degraded, clean)`` as CHW tensors."""

    def __init__(self, images: RestorationImages, degradation: Degradation, crop: int | None = None) -> None:
        self.images = images
        self.degradation = degradation
        self.crop = crop
        self.names = list(images.test)
        if not self.names:
            raise DataError("no held-out images")

    def __len__(self) -> int:
        return len(self.names)

    def pair(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """``(degraded, clean)`` as ``(H, W, C)`` arrays in [0, 1]."""
        clean = self.images.load(self.names[index])
        if min(clean.shape[:2]) < MIN_HELD_OUT_SIDE:  # SSIM's 7x7 window does not fit (skimage's error named no file)
            raise DataError(
                f"held-out image {self.names[index]} is {clean.shape[1]}x{clean.shape[0]}; held-out images need at "
                f"least {MIN_HELD_OUT_SIDE} px per side"
            )
        if self.crop is not None:
            h, w = clean.shape[:2]
            y, x = max(0, (h - self.crop) // 2), max(0, (w - self.crop) // 2)
            clean = clean[y : y + self.crop, x : x + self.crop]
        sigma = self.degradation.eval_sigma if self.degradation.kind == "noise" else None
        return self.degradation.apply(clean, 1000 + index, sigma=sigma), clean

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        degraded, clean = self.pair(index)
        return to_tensor(degraded), to_tensor(clean)


def _charbonnier(x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt((x - y).square() + eps * eps).mean()


class RestoreTask(Task):
    """Denoising or JPEG artefact removal (see the module docstring)."""

    best_metric = "psnr"
    higher_is_better = True

    def __init__(self, config: RestoreConfig) -> None:
        if config.loss not in ("l1", "charbonnier"):
            raise ValueError(f"loss must be 'l1' or 'charbonnier', got {config.loss!r}")
        unknown = sorted(set(config.baselines) - set(DEFAULT_BASELINES))
        if unknown:
            raise ValueError(f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(DEFAULT_BASELINES)}")
        if config.patch_size < 1 or config.patches_per_epoch < 1:
            raise ValueError(
                f"patch size and patches per epoch must be positive, got {config.patch_size}, "
                f"{config.patches_per_epoch}"
            )
        if config.eval_crop is not None and config.eval_crop < 1:
            raise ValueError(f"eval crop must be positive, got {config.eval_crop}")
        with torch.device("meta"):  # the model name and arguments, checked before any data is read
            build_restoration_model(config.model, 3 if config.color else 1, config.patch_size, config.model_args)
        if config.init_from is not None:
            self._check_init_from(config)
        self.config = config
        self.name = config.task
        self.deg = config.degradation()
        self.mode = "RGB" if config.color else "L"
        self.baseline_scores: dict[str, dict[str, float]] = {}

    def run_defaults(self) -> dict[str, Any]:
        return dict(RESTORE_RUN_DEFAULTS)

    def config_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self.config).items() if k != "run"}

    def datasets(self) -> tuple[Dataset, Dataset]:
        c = self.config
        images = restoration_images(c.data, c.val_data, self.mode)
        train = PatchDataset(images, self.deg, c.patch_size, c.patches_per_epoch)
        val = HeldOutImages(images, self.deg, c.eval_crop)
        log.info(
            "%s (%s): %d training images (%s), %d held-out images at %s, %s",
            c.task,
            self.deg.describe(),
            len(images.train),
            images.source,
            len(val),
            "full size" if c.eval_crop is None else f"a {c.eval_crop} px centre crop",
            "colour (PSNR/SSIM on Y)" if c.color else "grey",
        )
        self.baseline_scores = self._baselines(val)
        return train, val

    def _baselines(self, val: HeldOutImages) -> dict[str, dict[str, float]]:
        which = ("jpeg",) if self.deg.kind == "jpeg" else self.config.baselines
        scores: dict[str, list[tuple[float, float]]] = {}
        for i in range(len(val)):
            degraded, clean = val.pair(i)
            for name, out in classical_baselines(clean, degraded, self.deg, which=which).items():
                scores.setdefault(name, []).append((psnr(clean, out), ssim(clean, out)))
        result = {
            k: {"psnr": float(np.mean([p for p, _ in v])), "ssim": float(np.mean([s for _, s in v]))}
            for k, v in scores.items()
        }
        log.info(
            "baselines on the held-out images: %s",
            ", ".join(f"{k} {v['psnr']:.2f} dB / {v['ssim']:.4f}" for k, v in result.items()),
        )
        return result

    @staticmethod
    def _check_init_from(config: RestoreConfig) -> None:
        """``init_from`` must be a restoration checkpoint of the same network (name, arguments, channels);
        its degradation may differ (e.g. fine-tune a sigma 25 denoiser at sigma 50, or a denoiser on JPEG)."""
        meta = read_meta(config.init_from)
        if checkpoint_kind(meta) not in RESTORE_TASKS:
            raise CheckpointError(
                f"--init-from {config.init_from} is not a restoration checkpoint (train one with --task denoise|dejpeg)"
            )
        want = {"model": config.model, "in_chans": 3 if config.color else 1, "model_args": config.model_args}
        have = {k: meta.get(k) for k in want}
        diff = [f"{k} {have[k]!r} (now {want[k]!r})" for k in want if json.loads(json.dumps(want[k])) != have[k]]
        if diff:
            raise CheckpointError(f"--init-from {config.init_from} holds another network: {'; '.join(diff)}")

    def build_model(self) -> nn.Module:
        c = self.config
        model = build_restoration_model(c.model, MODES[self.mode], c.patch_size, c.model_args)
        if c.init_from is not None:
            try:
                state = load_weights(c.init_from)
                check_finite_weights(state, c.init_from)
                model.load_state_dict(state)
            except RuntimeError as exc:
                raise CheckpointError(
                    f"--init-from {c.init_from} does not fit {c.model}: {one_line(exc, first=True)}"
                ) from exc
            log.info("initialised %s from %s", c.model, c.init_from)
        return model

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        degraded, clean = batch
        out = model(degraded)
        if self.config.loss == "charbonnier":
            return _charbonnier(out.float(), clean.float(), self.config.charbonnier_eps), {}
        return F.l1_loss(out.float(), clean.float()), {}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, ctx: Any) -> dict[str, float]:
        was_training = model.training
        model.eval()
        total_p, total_s, n = 0.0, 0.0, 0
        for degraded, clean in ctx.loader(self.val_set, batch_size=1):
            deg = degraded[0].permute(1, 2, 0).numpy()
            with ctx.autocast():
                out = restore_image(model, deg, tile=self.config.tile, overlap=self.config.overlap, device=ctx.device)
            ref = clean[0].permute(1, 2, 0).numpy()
            total_p += psnr(ref, out)
            total_s += ssim(ref, out)
            n += 1
        total_p, total_s, n = ctx.sum([total_p, total_s, n])
        model.train(was_training)
        return {"psnr": total_p / max(n, 1), "ssim": total_s / max(n, 1)}

    def check_resume(self, meta: dict[str, Any]) -> None:
        """A resumed run continues the same training: the checkpoint must be this task's, with the same
        model, image mode, patch size and degradation (the loop has checked its kind)."""
        mine = json.loads(json.dumps(self.checkpoint_meta()))  # as stored: tuples become lists
        keys = ("task", "model", "model_args", "mode", "patch_size", "degradation")
        diff = [f"{k} {meta.get(k)!r} (now {mine[k]!r})" for k in keys if meta.get(k) != mine[k]]
        if diff:
            raise CheckpointError(
                "the checkpoint was trained with other settings; resume continues the same run: " + ", ".join(diff)
            )

    def checkpoint_meta(self) -> dict[str, Any]:
        c = self.config
        return {
            "task": c.task,
            "model": c.model,
            "model_args": c.model_args,
            "in_chans": MODES[self.mode],
            "mode": self.mode,
            "patch_size": c.patch_size,
            "degradation": self.deg.describe(),
        }

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        row = run.get("best_row") or {}  # the loop keeps the best epoch's row, across a resume too
        ema = row.get("val_psnr_ema") is not None and row.get("val_psnr_ema") == run.get("best")
        best = {"psnr": run.get("best"), "ssim": row.get("val_ssim_ema" if ema else "val_ssim")}
        return {
            "task": self.config.task,
            "model": self.config.model,
            "degradation": self.deg.describe(),
            "restore_config": {k: v for k, v in asdict(self.config).items() if k not in ("baselines", "run")},
            "best_val_psnr": best.get("psnr"),
            "best_val_ssim": best.get("ssim"),
            "metric_channel": "Y (BT.601)" if self.config.color else "grey",
            "baselines": {k: v["psnr"] for k, v in self.baseline_scores.items()},
            "baselines_ssim": {k: v["ssim"] for k, v in self.baseline_scores.items()},
        }

    def epoch_log(self, row: dict[str, Any]) -> str:
        parts = [f"train_loss {row.get('train_loss', float('nan')):.4f}"]
        if "val_psnr" in row:
            parts.append(f"val PSNR {row['val_psnr']:.2f} dB  SSIM {row['val_ssim']:.4f}")
        return "  ".join(parts)


# -- inference on whole images ------------------------------------------------------------------------


def _tiles(length: int, tile: int, overlap: int) -> list[int]:
    if length <= tile:
        return [0]
    step = tile - overlap
    starts = [*range(0, length - tile, step), length - tile]
    return sorted(set(starts))


def _ramp(length: int, overlap: int, first: bool, last: bool) -> torch.Tensor:
    """1-D blending weight of a tile: linear ramps over the overlaps (not at the image border)."""
    w = torch.ones(length)
    r = min(overlap, length // 2)
    if r > 0:
        ramp = (torch.arange(r, dtype=torch.float32) + 0.5) / r
        if not first:
            w[:r] = ramp
        if not last:
            w[length - r :] = ramp.flip(0)
    return w


@torch.no_grad()
def restore_image(
    model: nn.Module,
    image: np.ndarray,
    tile: int | None = 512,
    overlap: int = 32,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Restore ``image`` ``(H, W, C)`` in [0, 1] with ``model`` (eval mode, NCHW); returns the same shape,
    clipped to [0, 1]. Images with a side above ``tile`` are cut into ``tile``-sized tiles overlapping by
    ``overlap`` pixels and blended with linear ramps (``tile=None``: always whole)."""
    device = torch.device(device)
    x = to_tensor(image)[None].to(device)
    h, w = x.shape[-2:]
    if tile is None or (h <= tile and w <= tile):
        out = model(x).float()
    else:
        if overlap >= tile:
            raise ValueError(f"tile overlap {overlap} must be smaller than the tile {tile}")
        out = torch.zeros_like(x, dtype=torch.float32)
        weight = torch.zeros((1, 1, h, w), device=device)
        ys, xs = _tiles(h, tile, overlap), _tiles(w, tile, overlap)
        for y in ys:
            for x0 in xs:
                th, tw = min(tile, h), min(tile, w)
                part = model(x[..., y : y + th, x0 : x0 + tw]).float()
                wy = _ramp(th, overlap, y == 0, y + th >= h)
                wx = _ramp(tw, overlap, x0 == 0, x0 + tw >= w)
                wt = (wy[:, None] * wx[None, :]).to(device)[None, None]
                out[..., y : y + th, x0 : x0 + tw] += part * wt
                weight[..., y : y + th, x0 : x0 + tw] += wt
        out = out / weight
    return out[0].clamp(0, 1).permute(1, 2, 0).cpu().numpy()


def restoration_model_from_meta(meta: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    """The network a restoration checkpoint's metadata describes (weights not loaded)."""
    missing = [k for k in ("model", "in_chans", "patch_size") if k not in meta]
    if missing:
        raise CheckpointError(f"restoration checkpoint without {', '.join(missing)} in its metadata")
    in_chans, patch = meta["in_chans"], meta["patch_size"]
    if in_chans not in (1, 3) or not isinstance(patch, int) or not 1 <= patch <= MAX_SIZE:
        raise CheckpointError(f"restoration checkpoint with in_chans {in_chans!r} and patch size {patch!r}")
    return build_restoration_model(meta["model"], in_chans, patch, args)


def load_restoration_model(checkpoint: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict]:
    """The model of a restoration checkpoint (``RUN/best``, ``RUN/last`` or a run folder) and its metadata."""
    model, meta, _ = load_checkpoint_model(checkpoint, RESTORE_TASKS, restoration_model_from_meta)
    return on_device(model, device), meta


def train(config: RestoreConfig) -> dict[str, Any]:
    """Train a restoration network as ``config`` says through the one loop; returns the run summary."""
    require_all(REQUIRES)
    return fit(RestoreTask(config), config.run)


def _read_image(src: Path) -> tuple[Image.Image, np.ndarray, str, float]:
    """The image at ``src``, its pixels as float32 in 0..1, its mode (``"I;16"`` for 16-bit grey) and the scale
    (255 or 65535) of its integer values, by the data layer's reader; an unreadable file or an unsupported mode
    is an :class:`~pdevision.data.imageio.ImageReadError` (a :class:`DataError`)."""
    return read_image_native(src, caller="restore")


def _tiff_bits(img: Image.Image) -> int:
    """The largest bits per sample a TIFF's header states (its ``BitsPerSample`` tag), 0 for other files."""
    tags = getattr(img, "tag_v2", None)
    value = tags.get(258) if tags is not None else None
    values = value if isinstance(value, tuple) else (value,)
    return max((int(v) for v in values if isinstance(v, int)), default=0)


def _check_output_format(dst: Path) -> None:
    """Refuse, before any work, an output name whose extension names no image format Pillow writes (the
    temporary file it is saved under would otherwise be named in the error)."""
    Image.init()
    fmt = Image.registered_extensions().get(dst.suffix.lower())
    if fmt is None or fmt not in Image.SAVE:
        what = f"extension {dst.suffix!r}" if dst.suffix else "no extension"
        raise DataError(
            f"output {dst} has {what}, which names no image format to write; "
            "give a name ending in .png, .tif, .jpg, .bmp or .webp"
        )


def restore_file(
    checkpoint: str | Path,
    src: str | Path,
    dst: str | Path,
    tile: int | None = 512,
    overlap: int = 32,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Restore the image file ``src`` into ``dst`` with the same size and mode.

    Grey (L) and colour (RGB) images work with either kind of checkpoint: a grey model restores each
    colour channel on its own, a colour model restores a grey image as three equal channels (then
    their mean). An alpha channel (LA, RGBA) is kept as it is. 16-bit grey images (Pillow's ``I;16``
    modes, as it opens 16-bit PNG and TIFF; and 32-bit integer ``I`` images holding 16-bit values) are
    restored on the 0-65535 scale and written as 16-bit (``I;16``). Other modes (palette, float, CMYK,
    32-bit values above 65535) get an error. The output format follows ``dst``'s extension.
    """
    src, dst = Path(src), Path(dst)
    if src.is_dir():
        raise DataError(f"{src} is a folder; restore takes one image file")
    if src.exists() and not src.is_file():  # a FIFO or a device: reading it would wait forever
        raise DataError(f"{src} is not a file; restore takes one image file")
    if dst.is_dir():
        raise DataError(f"{dst} is a folder; give the output image's file name (e.g. {dst / src.name})")
    if src.exists() and dst.exists() and os.path.samefile(src, dst):
        raise DataError(f"output {dst} is the input image; give another name (restoring in place loses the original)")
    _check_output_format(dst)
    model, meta = load_restoration_model(checkpoint, device)
    img, arr, mode, scale = _read_image(src)
    bits = _tiff_bits(img)
    if bits > 8 and scale <= 255:  # Pillow has no 16-bit colour mode: it read the samples as 8-bit
        log.warning(
            "%s has %d-bit colour samples, which the image reader (Pillow) reads as 8-bit: %s is written with 8 bits "
            "per channel (16-bit depth is kept for grey images only)",
            src,
            bits,
            dst,
        )
    arr = arr[..., None] if arr.ndim == 2 else arr
    alpha = arr[..., -1:] if mode in ("LA", "RGBA") else None
    colour = arr[..., :3] if mode.startswith("RGB") else arr[..., :1]
    in_chans = int(meta["in_chans"])
    start = time.perf_counter()
    if in_chans == colour.shape[-1]:
        out = restore_image(model, colour, tile, overlap, device)
    elif in_chans == 1:  # grey model, colour image: channel by channel
        out = np.concatenate(
            [restore_image(model, colour[..., i : i + 1], tile, overlap, device) for i in range(3)], -1
        )
    else:  # colour model, grey image
        out = restore_image(model, np.repeat(colour, 3, axis=-1), tile, overlap, device).mean(-1, keepdims=True)
    seconds = time.perf_counter() - start
    if alpha is not None:
        out = np.concatenate([out, alpha], -1)
    q = np.clip(np.rint(out * scale), 0, scale).astype(np.uint16 if scale > 255 else np.uint8)
    result = Image.fromarray(q[..., 0] if q.shape[-1] == 1 else q)
    # written beside dst under a temporary name (same extension, so the same format) and renamed over it: a
    # failed or killed save leaves a file that was already at dst as it was (saving onto dst emptied it first)
    tmp = dst.with_name(f".{dst.stem}.tmp-{os.getpid()}{dst.suffix}")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        result.save(tmp)
        os.replace(tmp, dst)
    except (KeyError, ValueError, OSError) as exc:
        with contextlib.suppress(OSError):  # (its folder may not exist: the error above says why)
            tmp.unlink(missing_ok=True)
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(f"cannot write a {mode} image to {dst} ({type(exc).__name__}: {text})") from exc
    return {
        "input": str(src),
        "output": str(dst),
        "size": list(img.size),
        "mode": mode,
        "model": meta["model"],
        "task": meta.get("task"),
        "seconds": seconds,
        "tiled": tile is not None and max(img.size) > tile,
        "finite": bool(math.isfinite(float(out.sum()))),
    }


# -- the command line: train --task denoise | dejpeg, and pdevision restore ------------------------------------


class RestoreCommands(TaskCommands):
    """``train --task denoise`` and ``train --task dejpeg`` (one class, two registrations) and ``restore``."""

    default_output = "runs/train"
    requires = REQUIRES
    config_class: type[RestoreConfig] = RestoreConfig  # its fields with a Flag are the task's flags
    run_flag_defaults: ClassVar[dict[str, Any]] = {
        "--epochs": 2,
        "--batch-size": 16,
        "--lr": 2e-3,
        "--time-budget": 300,
    }

    def __init__(self, task: str) -> None:
        self.name = task
        self.skip_flags = ("--quality",) if task == "denoise" else ("--sigma",)  # the other task's degradation
        self.help = (
            "Gaussian denoising (default: vheatir_micro, grey, embedded photos, 300 s)"
            if task == "denoise"
            else "JPEG artefact removal (default: vheatir_micro, quality 10, embedded photos, 300 s)"
        )

    def fill(self) -> dict[str, str]:
        return {"{task}": self.name}

    def config(self, args: argparse.Namespace, run: RunConfig) -> RestoreConfig:
        if args.data is None and args.patch_size > 300:
            raise UsageError(f"--patch-size {args.patch_size} is larger than the embedded photos allow (at most 300)")
        values = A.task_fields(args, self.config_class, skip=("task",))
        if values.get("baselines") is not None:
            values["baselines"] = tuple(values["baselines"])  # argparse's list
        return self.config_class(task=self.name, **values, run=run)

    def run(self, config: RestoreConfig) -> dict[str, Any]:
        return train(config)

    def report(self, s: dict[str, Any], config: RestoreConfig) -> str:
        base = ", ".join(f"{k} {v:.2f}" for k, v in s["baselines"].items())
        best, best_ssim = s["best_val_psnr"], s["best_val_ssim"]
        return (
            f"{s['model']} {s['task']} ({s['degradation']}): {s['status']}, {s['epochs_run']} epochs, {s['steps']} "
            f"steps in {s['seconds']:.0f} s; best held-out PSNR {best if best is None else f'{best:.2f}'} dB, "
            f"SSIM {best_ssim if best_ssim is None else f'{best_ssim:.4f}'} "
            f"({s['metric_channel']}); baselines (dB): {base}; run folder {config.run.output}"
        )

    def evaluate(self, args: argparse.Namespace) -> str:
        raise UsageError(
            f"{args.checkpoint} is a {self.name} checkpoint; restore images with "
            f"`pdevision restore --checkpoint {args.checkpoint} IN OUT` (its held-out scores are in the run folder)"
        )

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        raise UsageError(
            f"{args.checkpoint} is a {self.name} checkpoint; restore images with "
            f"`pdevision restore --checkpoint {args.checkpoint} IN OUT`"
        )


@dataclass
class RestoreOptions(CheckpointOptions):
    """``pdevision restore``'s flags."""

    input: str = setting(None, V.path, Flag(name="input", help="image file (L, LA, RGB, RGBA or 16-bit grey)"))
    output: str = setting(
        None, V.output_file, Flag(name="output", help="output file (format from the extension); same size and mode")
    )
    tile: int = setting(512, V.tile, Flag(help="tile side for large images (0: whole image; default 512)"))
    overlap: int = setting(32, V.tile, Flag(help="tile overlap in pixels (default 32)"))
    device: str = setting("auto", V.device, Flag(help=DEVICE_HELP))


def run_restore(args: argparse.Namespace) -> tuple[str, int]:
    """``pdevision restore``: one image through a restoration checkpoint."""
    if args.overlap < 0 or (args.tile and args.overlap >= args.tile):
        raise UsageError(f"--overlap must be >= 0 and smaller than --tile, got {args.overlap} (tile {args.tile})")
    device = resolve_device(args.device)
    try:
        r = restore_file(args.checkpoint, args.input, args.output, args.tile or None, args.overlap, device)
    except RuntimeError as exc:  # e.g. out of memory: a smaller --tile helps
        return f"pdevision restore: failed: {one_line(exc, first=True)} (try a smaller --tile)", 1
    return (
        f"{r['input']} -> {r['output']}: {r['size'][0]}x{r['size'][1]} {r['mode']}, {r['model']} ({r['task']}), "
        f"{'tiled, ' if r['tiled'] else ''}{r['seconds']:.2f} s"
    ), 0


register(RestoreCommands("denoise"))
register(RestoreCommands("dejpeg"))
register_command(
    "restore",
    Command(
        "denoise / remove JPEG artefacts from an image with a restoration checkpoint",
        RestoreOptions,
        run_restore,
        flags={"checkpoint": {"help": "RUN/best (or a run folder) of train --task denoise|dejpeg"}},
    ),
)
