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

import contextlib
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

import pdevision.models.restoration as restoration_models
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
from pdevision.engine.checkpoint import CheckpointError, load_weights, read_meta
from pdevision.tasks.base import Task

log = logging.getLogger(__name__)

__all__ = [
    "RESTORE_TASKS",
    "HeldOutImages",
    "RestoreConfig",
    "RestoreTask",
    "load_restoration_model",
    "parse_sigma",
    "restore_file",
    "restore_image",
]

RESTORE_TASKS = ("denoise", "dejpeg")
RESTORATION_PREFIXES = tuple(f"{arch}_" for arch in restoration_models.ARCHITECTURES)
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
                raise ValueError(f"a blind sigma range needs 0 <= low <= high <= 255 and high > 0, got {text!r}")
            return out
    try:
        value = float(text)
    except ValueError as exc:
        raise ValueError(f"sigma must be a number (e.g. 25) or a range (e.g. 0-55), got {text!r}") from exc
    if not (math.isfinite(value) and 0 <= value <= MAX_SIGMA):
        raise ValueError(f"sigma must be in [0, 255] (the 0-255 scale), got {text!r}")
    if value == 0:  # nothing to remove: the held-out PSNR of the noisy input is infinite and the run stops
        raise ValueError("a fixed sigma must be above 0 (a blind range such as 0-55 may start at 0)")
    return value


@dataclass
class RestoreConfig:
    """What a restoration run needs beyond the loop's knobs."""

    task: str = "denoise"  # denoise | dejpeg
    sigma: float | tuple[float, float] = 25.0
    quality: int = 10
    model: str = "vheatir_micro"
    model_args: dict[str, Any] = field(default_factory=dict)
    color: bool = False  # grey by default (the papers' grey denoising setting)
    data: str | None = None
    val_data: str | None = None
    patch_size: int = 32
    patches_per_epoch: int = 1024
    loss: str = "l1"  # l1 | charbonnier
    charbonnier_eps: float = 1e-3
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    tile: int = 512
    overlap: int = 32
    eval_crop: int | None = None  # None: held-out images at full size; else their centre crop of this side
    init_from: str | None = None  # a restoration checkpoint of the same model and mode to start from (fine-tuning)

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


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _charbonnier(x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt((x - y).square() + eps * eps).mean()


def build_restoration_model(name: str, in_chans: int, patch_size: int, model_args: dict[str, Any]) -> nn.Module:
    """A registered restoration model (``vheatir_*``, ``swinir_*``, ``dncnn_*``) for ``in_chans`` channels;
    vHeatIR's FVEs are sized for ``patch_size`` unless ``model_args`` says otherwise."""
    if not name.startswith(RESTORATION_PREFIXES):
        raise ValueError(
            f"{name!r} is not a restoration model; choose one of "
            + ", ".join(f"{a}_micro/_base" for a in restoration_models.ARCHITECTURES)
        )
    factory = getattr(restoration_models, name, None)
    if factory is None:
        raise ValueError(f"unknown restoration model {name!r}")
    args = dict(model_args)
    if name.startswith("vheatir_"):
        args.setdefault("img_size", patch_size)
    try:
        return factory(in_chans=in_chans, **args)
    except TypeError as exc:  # an unknown or ill-typed model argument
        raise ValueError(f"{name} does not take the model arguments {model_args}: {exc}") from exc


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
        self.history: list[dict[str, float]] = []

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
        if meta.get("kind") != "restoration":
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
                model.load_state_dict(load_weights(c.init_from))
            except RuntimeError as exc:
                raise CheckpointError(f"--init-from {c.init_from} does not fit {c.model}: {_first_line(exc)}") from exc
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
        metrics = {"psnr": total_p / max(n, 1), "ssim": total_s / max(n, 1)}
        self.history.append(metrics)
        return metrics

    def extra_state(self) -> dict[str, Any]:
        return {"restore_history": [dict(m) for m in self.history]}

    def check_resume(self, meta: dict[str, Any]) -> None:
        """A resumed run continues the same training: the checkpoint must be this task's, with the same
        model, image mode, patch size and degradation."""
        if meta.get("kind") != "restoration":
            kind = meta.get("kind") or ("classification" if "classes" in meta else "unknown")
            raise CheckpointError(
                f"that is not a restoration checkpoint (kind {kind!r}); "
                f"resume RUN/last of a --task {self.config.task} run"
            )
        mine = json.loads(json.dumps(self.checkpoint_meta()))  # as stored: tuples become lists
        keys = ("task", "model", "model_args", "mode", "patch_size", "degradation")
        diff = [f"{k} {meta.get(k)!r} (now {mine[k]!r})" for k in keys if meta.get(k) != mine[k]]
        if diff:
            raise CheckpointError(
                "the checkpoint was trained with other settings; resume continues the same run: " + ", ".join(diff)
            )

    def load_extra_state(self, state: dict[str, Any], model: nn.Module, ema: nn.Module | None) -> None:
        self.history = [dict(m) for m in state.get("restore_history", [])]  # best_val_* across a resume

    def checkpoint_meta(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "restoration",
            "task": c.task,
            "model": c.model,
            "model_args": c.model_args,
            "in_chans": MODES[self.mode],
            "mode": self.mode,
            "patch_size": c.patch_size,
            "degradation": self.deg.describe(),
        }

    def summary(self, run: dict[str, Any] | None = None) -> dict[str, Any]:
        best = max(self.history, key=lambda m: m["psnr"]) if self.history else {}
        if run is not None and run.get("best") is not None and best.get("psnr") != run["best"]:
            best = {"psnr": run["best"], "ssim": None}  # the loop's best (e.g. from before a resume)
        return {
            "task": self.config.task,
            "model": self.config.model,
            "degradation": self.deg.describe(),
            "restore_config": {k: v for k, v in asdict(self.config).items() if k != "baselines"},
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


def load_restoration_model(checkpoint: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict]:
    """The model of a restoration checkpoint (``RUN/best``, ``RUN/last`` or a run folder) and its metadata."""
    meta = read_meta(checkpoint)
    if meta.get("kind") != "restoration":
        raise CheckpointError(f"{checkpoint} is not a restoration checkpoint (train one with --task denoise|dejpeg)")
    missing = [k for k in ("model", "in_chans", "patch_size", "model_args") if k not in meta]
    if missing:
        raise CheckpointError(f"{checkpoint}: restoration checkpoint without {', '.join(missing)} in its metadata")
    model = build_restoration_model(meta["model"], int(meta["in_chans"]), int(meta["patch_size"]), meta["model_args"])
    try:
        model.load_state_dict(load_weights(checkpoint))
    except RuntimeError as exc:
        raise CheckpointError(f"{checkpoint} does not fit {meta['model']}: {_first_line(exc)}") from exc
    return model.to(device).eval(), meta


def _read_image(src: Path) -> tuple[Image.Image, np.ndarray, str, float]:
    """The image at ``src``, its pixels as float32 in 0..1, its mode (``"I;16"`` for 16-bit grey) and the scale
    (255 or 65535) of its integer values, by the data layer's reader; an unreadable file or an unsupported mode
    is an :class:`~pdevision.data.imageio.ImageReadError` (a :class:`DataError`)."""
    return read_image_native(src, caller="restore")


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
    model, meta = load_restoration_model(checkpoint, device)
    img, arr, mode, scale = _read_image(src)
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
