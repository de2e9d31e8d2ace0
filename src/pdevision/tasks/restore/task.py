"""Image restoration tasks for the one fit loop: ``denoise`` (Gaussian noise) and ``dejpeg`` (JPEG artefacts).

Training follows the papers' patch training (DnCNN, SwinIR): random patches of the clean training
photographs, flipped/rotated, degraded on the fly, an L1 loss (or Charbonnier, ``sqrt(d^2 + eps^2)``)
between the network's output and the clean patch. Evaluation restores each held-out image at full
size (tiled with overlap above ``tile`` pixels a side) with a fixed seeded degradation per image, and
reports PSNR and SSIM (Y channel for colour, see :mod:`pdevision.data.restoration`); the classical
baselines run once on the same degraded images. ``best/`` is picked by PSNR.

:func:`~pdevision.tasks.restore.apply.restore_image` and :func:`~pdevision.tasks.restore.apply.restore_file` apply a
trained checkpoint to any image.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from pdevision._optional import require_all
from pdevision.data.datasets import DataError
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
from pdevision.engine.checkpoint import CheckpointError, checkpoint_kind, load_weights, read_meta
from pdevision.engine.loop import fit
from pdevision.engine.modeling import check_finite_weights
from pdevision.engine.runtime import one_line
from pdevision.engine.task import Task
from pdevision.models.restoration import create_restoration_model
from pdevision.tasks.restore.apply import restore_image
from pdevision.tasks.restore.config import (
    DEFAULT_BASELINES,
    MIN_HELD_OUT_SIDE,
    REQUIRES,
    RESTORE_RUN_DEFAULTS,
    RESTORE_TASKS,
    RestoreConfig,
)

log = logging.getLogger(__name__)


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
            create_restoration_model(config.model, 3 if config.color else 1, config.patch_size, config.model_args)
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

    def create_model(self) -> nn.Module:
        c = self.config
        model = create_restoration_model(c.model, MODES[self.mode], c.patch_size, c.model_args)
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


def train(config: RestoreConfig) -> dict[str, Any]:
    """Train a restoration network as ``config`` says through the one loop; returns the run summary."""
    require_all(REQUIRES)
    return fit(RestoreTask(config), config.run)
