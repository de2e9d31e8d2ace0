"""Data for image restoration: clean photographs, patch sampling, seeded degradations, metrics and
classical baselines.

- **Images**: a folder of clean images at any nesting (BSD400, DIV2K, Set12 layouts), or the
  embedded default: real photographs bundled with scikit-image and scikit-learn, split once and for
  all into training photos and held-out test photos (:data:`EMBEDDED_TRAIN`, :data:`EMBEDDED_TEST`).
  Test images are evaluated at full size.
- **Degradations** (:class:`Degradation`): additive white Gaussian noise of standard deviation
  ``sigma`` on the 0-255 scale (a fixed level or a blind range, not clipped, as in DnCNN/SwinIR),
  or JPEG compression through Pillow at ``quality``. Every call takes a seed; the same seed gives
  the same degraded image.
- **Metrics**: PSNR and SSIM from :mod:`skimage.metrics` on images quantised to 8 bits; colour
  images are measured on the luma Y of ITU-R BT.601 (``skimage.color.rgb2ycbcr``, Y in [16, 235]),
  as the denoising papers (DnCNN, SwinIR) do; SSIM with Wang et al.'s Gaussian window (sigma 1.5,
  population covariance). No border is cropped.
- **Baselines** (:func:`classical_baselines`): the degraded input, scikit-image's non-local means,
  wavelet (BayesShrink) and total-variation (Chambolle) denoisers, and BM3D (``bm3d`` package),
  each given the true noise level; their parameters are the libraries' documented settings, not
  tuned here. For JPEG only the decoded input is a baseline.

Arrays: images are ``float32`` ``(H, W, C)`` in [0, 1] (C = 1 grey, 3 colour); tensors are CHW.
"""

from __future__ import annotations

import io
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from pdevision._optional import require
from pdevision.data.embedded import refuse_classification_set
from pdevision.data.errors import DataError
from pdevision.data.imageio import IMAGE_EXTENSIONS, open_rgb

log = logging.getLogger(__name__)

__all__ = [
    "EMBEDDED_TEST",
    "EMBEDDED_TRAIN",
    "Degradation",
    "PatchDataset",
    "RestorationImages",
    "classical_baselines",
    "embedded_images",
    "folder_images",
    "load_image",
    "psnr",
    "quantize",
    "restoration_images",
    "ssim",
    "to_tensor",
]

# The embedded default: real photographs only (no drawings, text pages or microscopy).
EMBEDDED_TRAIN: tuple[str, ...] = (
    "skimage:astronaut",
    "skimage:coffee",
    "skimage:rocket",
    "sklearn:china.jpg",
    "skimage:brick",
    "skimage:grass",
    "skimage:gravel",
    "skimage:moon",
    "skimage:clock",
)
EMBEDDED_TEST: tuple[str, ...] = ("skimage:camera", "skimage:coins", "skimage:chelsea", "sklearn:flower.jpg")
_COLOUR = {
    "skimage:astronaut",
    "skimage:coffee",
    "skimage:rocket",
    "sklearn:china.jpg",
    "skimage:chelsea",
    "sklearn:flower.jpg",
}

MODES = {"L": 1, "RGB": 3}


def _convert(img: Image.Image, mode: str) -> Image.Image:
    if img.mode == mode:
        return img
    if img.mode in ("RGBA", "LA", "P") and mode == "RGB":
        return img.convert("RGBA").convert("RGB")
    return img.convert(mode)


def _to_array(img: Image.Image) -> np.ndarray:
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return arr[..., None] if arr.ndim == 2 else arr


def _embedded(name: str, mode: str) -> np.ndarray:
    source, key = name.split(":", 1)
    if source == "skimage":
        arr = getattr(require("skimage.data", "data"), key)()
    else:
        arr = require("sklearn.datasets", "data").load_sample_image(key)
    return _to_array(_convert(Image.fromarray(arr), mode))


def load_image(path: str | Path, mode: str) -> np.ndarray:
    """An image file as ``(H, W, C)`` float32 in [0, 1], converted to ``mode`` (``"L"`` or ``"RGB"``).

    The file is read by :func:`pdevision.data.imageio.open_rgb`, the reader of every task (16-bit, 32-bit
    integer and float images scaled to 8 bits, EXIF orientation applied, palette, CMYK and alpha images
    converted); grey is its ITU-R 601 luma. A file that does not decode, is empty or is not a regular file
    raises :class:`~pdevision.data.imageio.ImageReadError` naming it (a ``ValueError``: one line on the
    command line)."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'L' or 'RGB', got {mode!r}")
    rgb = open_rgb(path)
    return _to_array(rgb if mode == "RGB" else rgb.convert("L"))


@dataclass
class RestorationImages:
    """Training and held-out clean images: names and a loader."""

    train: list[str]
    test: list[str]
    mode: str
    source: str

    def load(self, name: str) -> np.ndarray:
        return _load_cached(name, self.mode)


@lru_cache(maxsize=64)
def _load_cached(name: str, mode: str) -> np.ndarray:
    if name.startswith(("skimage:", "sklearn:")):
        return _embedded(name, mode)
    return load_image(name, mode)


def embedded_images(mode: str = "L") -> RestorationImages:
    """The embedded photographs (grey: all of them; colour: the colour photographs only)."""
    keep = (lambda n: True) if mode == "L" else (lambda n: n in _COLOUR)
    return RestorationImages(
        [n for n in EMBEDDED_TRAIN if keep(n)], [n for n in EMBEDDED_TEST if keep(n)], mode, "embedded"
    )


def _scan(root: Path) -> list[str]:
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"data path {root} is not a folder")
    files = []
    for dirpath, dirs, names in sorted(os.walk(root, followlinks=True)):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [str(Path(dirpath) / n) for n in sorted(names) if n.lower().endswith(IMAGE_EXTENSIONS)]
    if not files:
        raise DataError(f"data folder {root} has no images (looked for {', '.join(IMAGE_EXTENSIONS)})")
    return files


def folder_images(root: str | Path, val_root: str | Path | None = None, mode: str = "L") -> RestorationImages:
    """Clean images of a folder at any nesting. Held-out images: ``val_root`` when given; else the
    folder's ``test``/``val``/``valid`` sub-folder next to a ``train`` one; else every tenth image
    (sorted by path, at least one)."""
    refuse_classification_set(root, "a folder of clean images (or the embedded photos, without --data)")
    root = Path(root)
    if val_root is not None:
        return RestorationImages(_scan(root), _scan(Path(val_root)), mode, str(root))
    for held in ("test", "val", "valid", "validation"):
        if (root / "train").is_dir() and (root / held).is_dir():
            return RestorationImages(_scan(root / "train"), _scan(root / held), mode, str(root))
    files = _scan(root)
    if len(files) < 2:
        raise DataError(f"data folder {root} needs at least 2 images (training and held-out), found {len(files)}")
    test = files[::10]
    return RestorationImages([f for f in files if f not in set(test)], test, mode, str(root))


def restoration_images(data: str | None, val_data: str | None = None, mode: str = "L") -> RestorationImages:
    """The embedded default (``data`` is ``None``) or :func:`folder_images`."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'L' or 'RGB', got {mode!r}")
    if data is None:
        if val_data is not None:
            return RestorationImages(list(embedded_images(mode).train), _scan(Path(val_data)), mode, "embedded")
        return embedded_images(mode)
    return folder_images(data, val_data, mode)


# -- degradations -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Degradation:
    """Gaussian noise (``kind="noise"``, ``sigma`` a level or a ``(low, high)`` blind range, 0-255 scale)
    or JPEG (``kind="jpeg"``, Pillow ``quality``). ``apply(clean, seed)`` is deterministic in ``seed``."""

    kind: str = "noise"
    sigma: float | tuple[float, float] = 25.0
    quality: int = 10

    def __post_init__(self) -> None:
        if self.kind not in ("noise", "jpeg"):
            raise ValueError(f"degradation kind must be 'noise' or 'jpeg', got {self.kind!r}")
        if self.kind == "noise":
            low, high = self.sigma if isinstance(self.sigma, tuple) else (self.sigma, self.sigma)
            if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high):
                raise ValueError(f"noise sigma must be finite and >= 0 (a range low <= high), got {self.sigma}")
        if self.kind == "jpeg" and (isinstance(self.quality, bool) or not 1 <= self.quality <= 100):
            raise ValueError(f"JPEG quality must be an integer in 1..100, got {self.quality}")

    @property
    def blind(self) -> bool:
        return self.kind == "noise" and isinstance(self.sigma, tuple)

    @property
    def eval_sigma(self) -> float:
        """Noise level of the held-out evaluation: the level, or 25 for a blind range containing 25
        (else the range's middle)."""
        if not isinstance(self.sigma, tuple):
            return float(self.sigma)
        low, high = self.sigma
        return 25.0 if low <= 25 <= high else (low + high) / 2

    def describe(self) -> str:
        if self.kind == "jpeg":
            return f"JPEG q{self.quality}"
        if isinstance(self.sigma, tuple):
            return f"Gaussian noise, blind sigma {self.sigma[0]:g}-{self.sigma[1]:g}"
        return f"Gaussian noise sigma {self.sigma:g}"

    def apply(self, clean: np.ndarray, seed: int | Sequence[int], sigma: float | None = None) -> np.ndarray:
        """Degrade ``clean`` ``(H, W, C)`` in [0, 1]; ``sigma`` overrides a blind range's draw."""
        rng = np.random.default_rng(seed)
        if self.kind == "jpeg":
            return jpeg(clean, self.quality)
        if sigma is None:
            sigma = rng.uniform(*self.sigma) if isinstance(self.sigma, tuple) else float(self.sigma)
        return (clean + rng.standard_normal(clean.shape, dtype=np.float32) * np.float32(sigma / 255.0)).astype(
            np.float32
        )


def quantize(img: np.ndarray) -> np.ndarray:
    """``img`` in [0, 1] (clipped) as uint8."""
    return np.clip(np.rint(np.asarray(img, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)


def jpeg(clean: np.ndarray, quality: int) -> np.ndarray:
    """JPEG round trip through Pillow (4:2:0 for colour, Pillow's default) of ``(H, W, C)`` in [0, 1]."""
    q = quantize(clean)
    img = Image.fromarray(q[..., 0] if q.shape[-1] == 1 else q)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    with Image.open(buf) as dec:
        return _to_array(dec.convert(img.mode))


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """``(H, W, C)`` array to a CHW float tensor."""
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).float()


class PatchDataset(Dataset):
    """Random ``patch_size`` crops of the training images with a random flip/rotation (the 8 symmetries
    of the square, as DnCNN/SwinIR augment), degraded on the fly. ``length`` items per epoch; item ``i``
    is ``(degraded, clean)`` CHW tensors. Randomness comes from torch's generator (one draw per item),
    so ``torch.manual_seed`` makes a run reproducible and each epoch differs."""

    def __init__(
        self, images: RestorationImages, degradation: Degradation, patch_size: int = 48, length: int = 1024
    ) -> None:
        self.images = images
        self.degradation = degradation
        self.patch_size = patch_size
        self.length = length
        self.names = list(images.train)
        if not self.names:
            raise DataError("no training images")
        small = [n for n in self.names if min(images.load(n).shape[:2]) < patch_size]
        if small:
            raise DataError(f"{len(small)} training image(s) smaller than the patch size {patch_size}: {small[0]}")

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        seed = int(torch.randint(0, 2**62, (1,)).item())
        rng = np.random.default_rng(seed)
        img = self.images.load(self.names[int(rng.integers(len(self.names)))])
        p = self.patch_size
        y = int(rng.integers(img.shape[0] - p + 1))
        x = int(rng.integers(img.shape[1] - p + 1))
        patch = img[y : y + p, x : x + p]
        patch = np.rot90(patch, int(rng.integers(4)))
        if rng.integers(2):
            patch = patch[:, ::-1]
        clean = np.ascontiguousarray(patch)
        return to_tensor(self.degradation.apply(clean, seed + 1)), to_tensor(clean)


# -- metrics --------------------------------------------------------------------------------------


def _measured(img: np.ndarray) -> np.ndarray:
    """8-bit values (float64) of the channel that is measured: grey as is, colour as BT.601 luma."""
    q = quantize(img)
    if q.shape[-1] == 1:
        return q[..., 0].astype(np.float64)
    return require("skimage.color", "restore").rgb2ycbcr(q)[..., 0]


def psnr(clean: np.ndarray, restored: np.ndarray) -> float:
    """PSNR in dB of 8-bit-quantised images (Y channel for colour), ``skimage.metrics``."""
    peak_signal_noise_ratio = require("skimage.metrics", "restore").peak_signal_noise_ratio

    a, b = _measured(clean), _measured(restored)
    if np.array_equal(a, b):
        return float("inf")
    return float(peak_signal_noise_ratio(a, b, data_range=255))


def ssim(clean: np.ndarray, restored: np.ndarray) -> float:
    """SSIM of 8-bit-quantised images (Y channel for colour), Gaussian window sigma 1.5 (Wang et al.)."""
    structural_similarity = require("skimage.metrics", "restore").structural_similarity

    return float(
        structural_similarity(
            _measured(clean),
            _measured(restored),
            data_range=255,
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
        )
    )


# -- classical baselines ---------------------------------------------------------------------------


def classical_baselines(
    clean: np.ndarray,
    degraded: np.ndarray,
    degradation: Degradation,
    sigma: float | None = None,
    which: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """Outputs of the classical methods on ``degraded`` (``(H, W, C)`` in [0, 1]).

    Noise (``sigma``, 0-255, defaults to the degradation's evaluation level): ``noisy``, ``nlm``
    (``denoise_nl_means``, h = 0.8 sigma, 5x5 patches, distance 6, fast mode, as in scikit-image's
    example), ``wavelet`` (BayesShrink, soft), ``tv`` (Chambolle, weight = sigma/255), ``bm3d``
    (``bm3d.bm3d`` / ``bm3d_rgb``). JPEG: ``jpeg`` (the decoded input). ``which`` limits the set.
    """
    del clean
    if degradation.kind == "jpeg":
        out = {"jpeg": degraded}
        return {k: v for k, v in out.items() if not which or k in which}
    s = (sigma if sigma is not None else degradation.eval_sigma) / 255.0
    colour = degraded.shape[-1] == 3
    img = degraded if colour else degraded[..., 0]
    names = list(which) or ["noisy", "nlm", "wavelet", "tv", "bm3d"]
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == "noisy":
            res = img
        elif name == "nlm":
            res = require("skimage.restoration", "restore").denoise_nl_means(
                img,
                h=0.8 * s,
                sigma=s,
                fast_mode=True,
                patch_size=5,
                patch_distance=6,
                channel_axis=-1 if colour else None,
            )
        elif name == "wavelet":
            res = require("skimage.restoration", "restore").denoise_wavelet(
                img, sigma=s, method="BayesShrink", mode="soft", rescale_sigma=True, channel_axis=-1 if colour else None
            )
        elif name == "tv":
            res = require("skimage.restoration", "restore").denoise_tv_chambolle(
                img, weight=s, channel_axis=-1 if colour else None
            )
        elif name == "bm3d":
            bm3d = require("bm3d", "restore")
            res = bm3d.bm3d_rgb(img, s) if colour else bm3d.bm3d(img, s)
        else:
            raise ValueError(f"unknown baseline {name!r}")
        res = np.asarray(res, dtype=np.float32)
        out[name] = res if colour else res[..., None]
    return out
