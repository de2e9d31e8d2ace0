"""ImageNet-C corruptions (Hendrycks & Dietterich 2019) of uint8 RGB images, and a dataset wrapper applying them.

:func:`corrupt` applies one of the 15 corruptions of the ``imagecorruptions`` package at a severity 1-5;
:class:`CorruptedDataset` resizes and crops a classification set's images as for evaluation, corrupts them in
uint8 RGB with a seed per image, then converts and normalises them (the evaluation itself is in
:mod:`pdevision.engine.robustness`).

``imagecorruptions`` 1.1.2 predates NumPy 2, scikit-image 0.19 and setuptools 81; :func:`corrupt` runs it
unchanged with four local adaptations (no global state of other packages is changed): a
``resource_filename`` resolving its ``frost/`` images when ``pkg_resources`` is absent, ``gaussian(...,
multichannel=True)`` mapped to ``channel_axis=-1``, ``np.float_`` read as ``np.float64`` in its module, and
scikit-image's ``random_noise`` (impulse noise) seeded from NumPy's global state like the other corruptions.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import Compose

from pdevision._optional import require, require_all

__all__ = ["CORRUPTIONS", "CORRUPTION_REQUIRES", "SEVERITIES", "CorruptedDataset", "corrupt"]

CORRUPTIONS = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
SEVERITIES = (1, 2, 3, 4, 5)


class _NumpyCompat(types.ModuleType):
    """NumPy as seen by ``imagecorruptions``: everything forwarded, plus ``float_`` (removed in NumPy 2)."""

    float_ = np.float64

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


# the packages the corruptions need (module, extra), checked before a corrupted evaluation starts
CORRUPTION_REQUIRES = (("imagecorruptions", "robustness"), ("skimage", "robustness"))


def _resource_filename(package: str, name: str) -> str:
    module = importlib.import_module(package)
    return str(Path(module.__file__ or "").parent / name)


@functools.lru_cache(maxsize=1)
def _corruptions_module() -> types.ModuleType:
    """``imagecorruptions.corruptions``, importable and working on NumPy 2 / scikit-image >= 0.19."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.resource_filename = _resource_filename  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = shim
        try:
            module = require("imagecorruptions.corruptions", "robustness")
        finally:
            del sys.modules["pkg_resources"]
    else:
        module = require("imagecorruptions.corruptions", "robustness")
    gaussian = require("skimage.filters", "robustness").gaussian

    def gaussian_compat(image: np.ndarray, sigma: float = 1.0, multichannel: bool | None = None, **kw: Any) -> Any:
        if multichannel:
            kw["channel_axis"] = -1
        return gaussian(image, sigma=sigma, **kw)

    skimage = require("skimage", "robustness")
    require("skimage.util", "robustness")

    def random_noise_seeded(image: np.ndarray, **kw: Any) -> Any:  # draws its seed from NumPy's global state
        kw.setdefault("rng", int(np.random.randint(2**31 - 1)))  # noqa: NPY002
        return skimage.util.random_noise(image, **kw)

    module.gaussian = gaussian_compat  # type: ignore[attr-defined]
    module.sk = types.SimpleNamespace(  # type: ignore[attr-defined]
        util=types.SimpleNamespace(random_noise=random_noise_seeded), color=skimage.color
    )
    module.resource_filename = _resource_filename  # type: ignore[attr-defined]
    module.np = _NumpyCompat("numpy")  # type: ignore[attr-defined]
    return module


def corrupt(image: np.ndarray, name: str, severity: int, seed: int | None = None) -> np.ndarray:
    """``image`` (H, W, 3) uint8, H and W at least 32, under corruption ``name`` at ``severity`` (1-5), as
    ``imagecorruptions.corrupt`` returns it (float result truncated to uint8, after clipping to 0..255).
    ``seed`` fixes NumPy's global random state for the call (restored afterwards)."""
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose from {', '.join(CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"corruption severity must be 1-5, got {severity}")
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or min(image.shape[:2]) < 32:
        raise ValueError(
            f"corruptions need an (H, W, 3) uint8 image of at least 32x32, got {image.shape} {image.dtype}"
        )
    require_all(CORRUPTION_REQUIRES)  # (the module below is cached)
    module = _corruptions_module()
    state = np.random.get_state()  # noqa: NPY002 (imagecorruptions draws from NumPy's global state)
    try:
        if seed is not None:
            np.random.seed(seed)  # noqa: NPY002
        out = getattr(module, name)(Image.fromarray(image), severity)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return np.uint8(np.clip(np.asarray(out), 0, 255))


def split_transform(transform: Callable) -> tuple[Callable, Callable]:
    """(PIL -> PIL part, PIL -> tensor part) of a torchvision ``Compose`` evaluation transform."""
    steps = list(getattr(transform, "transforms", []))
    names = [type(t).__name__ for t in steps]
    to_tensor = ("ToTensor", "MaybeToTensor", "PILToTensor", "MaybePILToTensor")
    cut = next((i for i, n in enumerate(names) if n in to_tensor), None)
    if cut is None:
        raise ValueError(f"cannot split the evaluation transform {names} into image and tensor steps")
    return Compose(steps[:cut]), Compose(steps[cut:])


class CorruptedDataset(Dataset):
    """``base`` (yielding PIL images, label) after ``spatial``, corrupted, then ``to_tensor``."""

    def __init__(
        self,
        base: Dataset,
        spatial: Callable,
        to_tensor: Callable,
        corruption: str | None,
        severity: int,
        seed: int = 0,
        indices: Sequence[int] | None = None,
    ) -> None:
        if corruption is not None:
            require_all(CORRUPTION_REQUIRES)  # here, not in a data loader's worker
        self.base, self.spatial, self.to_tensor = base, spatial, to_tensor
        self.corruption, self.severity, self.seed = corruption, severity, seed
        self.indices = list(indices) if indices is not None else list(range(len(base)))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        index = self.indices[i]
        img, label = self.base[index]
        arr = np.asarray(self.spatial(img.convert("RGB")), dtype=np.uint8)
        if self.corruption is not None:
            c = CORRUPTIONS.index(self.corruption)
            seed = int(np.random.SeedSequence([self.seed, c, self.severity, index]).generate_state(1)[0])
            arr = corrupt(arr, self.corruption, self.severity, seed)
        return self.to_tensor(Image.fromarray(arr)), label
