"""What the figures share: models from checkpoints or names, real images, stage lists, plotting, JSON."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from pdevision._optional import require
from pdevision.data import ImageReadError, build_datasets, eval_transform_for, open_rgb
from pdevision.data.datasets import scan_folder
from pdevision.engine.metadata import MetadataError, parse_json
from pdevision.engine.modeling import create_model
from pdevision.models.hcnet import HcNet
from pdevision.models.pderesnet import PDEResNet
from pdevision.models.vheat import VHeat
from pdevision.models.waveformer import WaveFormer

log = logging.getLogger(__name__)

#: scikit-image sample photos used when neither a checkpoint's data nor ``data`` gives images
PHOTOS = ("chelsea", "astronaut", "coffee", "rocket", "cat", "coins", "camera", "moon")


class VizError(ValueError):
    """Input a figure cannot be made from (wrong model family, unreadable image, ...)."""


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    matplotlib = require("matplotlib", "viz")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: the smallest font size (points) of any text in a figure
MIN_FONT = 8


def subplots(rows: int, cols: int, figsize: tuple[float, float], **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` with a 2-D array of axes and constrained layout (colour bars, titles and tick labels
    kept clear of the neighbouring panels)."""
    return pyplot().subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained", **kwargs)


def colorbar(fig: Any, mappable: Any, ax: Any, label: str, ticks: int = 4, **kwargs: Any) -> Any:
    """A labelled colour bar for ``mappable`` next to ``ax`` (one axes or a list), at most ``ticks`` ticks."""
    from matplotlib.ticker import MaxNLocator

    bar = fig.colorbar(mappable, ax=ax, **kwargs)
    bar.locator = MaxNLocator(ticks)
    bar.update_ticks()
    bar.set_label(label, fontsize=MIN_FONT)
    bar.ax.tick_params(labelsize=MIN_FONT)
    return bar


def index_ticks(ax: Any, shape: tuple[int, ...], ticks: int = 4) -> None:
    """Whole-number ticks (at most about ``ticks`` per axis) on an image of ``shape`` whose pixels are indices."""
    for axis, n in ((ax.yaxis, shape[0]), (ax.xaxis, shape[1])):
        step = max(1, math.ceil(n / ticks))
        axis.set_ticks(range(0, n, step))


def save_figure(fig: Any, path: Path, dpi: int = 100) -> Path:
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_plain(data), indent=2))
    return path


def _plain(value: Any) -> Any:
    """JSON-safe copy: tensors and arrays to lists, non-finite floats to ``None``."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return _plain(value.tolist())
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


def run_folder_of(folder: Path) -> Path | None:
    """The run folder a checkpoint folder belongs to (``RUN/best`` -> ``RUN``), if it looks like one."""
    parent = folder.parent
    return parent if any((parent / f).exists() for f in ("config.json", "metrics.csv", "summary.json")) else None


def run_data(folder: Path) -> str | None:
    """The ``data`` a run was trained on (its ``config.json``), ``None`` for the embedded digits."""
    run = run_folder_of(folder)
    if run is None or not (run / "config.json").is_file():  # a FIFO would block: no run data then
        return None
    try:
        config = parse_json((run / "config.json").read_text())
    except (OSError, UnicodeDecodeError, MetadataError):
        return None
    data = config.get("data") if isinstance(config, dict) else None
    return data if isinstance(data, str) else None


def _spread(n_total: int, count: int) -> list[int]:
    if n_total == 0:
        return []
    count = min(count, n_total)
    return sorted({int(i) for i in np.linspace(0, n_total - 1, count)})


def validation_images(
    meta: dict[str, Any], data: str | None, count: int, val_split: float = 0.2
) -> tuple[torch.Tensor, list[int], list[str]]:
    """``count`` validation images of ``data`` (the embedded digits when ``None``), spread over the split,
    in the checkpoint's evaluation transform: ``(images NCHW, targets, class names)``."""
    tf = eval_transform_for(meta)
    _, val = build_datasets(data, int(meta["img_size"]), val_split, tf, tf)
    idx = _spread(len(val), count)
    if not idx:
        raise VizError(f"no validation images in {data or 'the embedded digits'}")
    items = [val[i] for i in idx]
    return torch.stack([x for x, _ in items]), [int(t) for _, t in items], list(val.classes)


def model_transform(model: nn.Module, img_size: int):
    """Resize to ``img_size`` square and normalise with the model's data config (timm)."""
    import timm.data
    from torchvision import transforms as T

    cfg = timm.data.resolve_data_config({}, model=model)
    return T.Compose(
        [
            T.Resize((img_size, img_size), interpolation=T.InterpolationMode.BICUBIC, antialias=True),
            T.ToTensor(),
            T.Normalize(cfg["mean"], cfg["std"]),
        ]
    )


def photo_images(transform, count: int) -> tuple[torch.Tensor, list[str]]:
    """scikit-image's sample photos (RGB; grey ones replicated) through ``transform``."""
    skimage_data = require("skimage.data", "viz")
    out, names = [], []
    for name in PHOTOS[: max(count, 0)]:
        arr = np.asarray(getattr(skimage_data, name)())
        img = Image.fromarray(arr).convert("RGB")
        out.append(transform(img))
        names.append(name)
    return torch.stack(out), names


def folder_images(data: str | Path, transform, count: int) -> tuple[torch.Tensor, list[str]]:
    """``count`` images of an ImageFolder tree (or its ``val/``), spread over the files."""

    root = Path(data)
    if not root.exists():
        raise VizError(f"data folder {root} does not exist")
    root = root / "val" if (root / "val").is_dir() else root
    _, samples, _ = scan_folder(root, verify=False)
    idx = _spread(len(samples), count)
    if not idx:
        raise VizError(f"no images found under {root}")
    paths = [samples[i][0] for i in idx]
    return load_image_files(paths, transform), [Path(p).name for p in paths]


def load_image_files(paths: Sequence[str | Path], transform) -> torch.Tensor:
    """Image files through ``transform``; a missing or undecodable file raises a one-line error."""
    out = []
    for p in paths:
        p = Path(p)
        try:  # the reader names what is wrong: a missing file, a folder, a FIFO or device (never opened)
            img = open_rgb(p)
        except ImageReadError as exc:
            raise VizError(str(exc)) from exc
        out.append(transform(img))
    return torch.stack(out)


def create_named_model(name: str, img_size: int, **kwargs: Any) -> nn.Module:
    """A randomly initialised model by name (ours or timm's; no download), eval mode, for ``img_size``
    inputs. Swin gets a window that divides its stride-32 map when 7 does not."""
    if name.startswith("swin") and "window_size" not in kwargs and (img_size // 32) % 7:
        side = max(1, img_size // 32)
        kwargs["window_size"] = next(w for w in (4, 2, 1) if side % w == 0)
    return create_model(name, img_size=img_size, **kwargs).eval()


def stage_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of each stage whose output the figures show: ``stages`` of our models, the
    modules of timm's ``feature_info`` otherwise."""
    info = getattr(model, "feature_info", None)
    names: list[str] = []
    if info is not None:
        try:
            names = [f["module"] for f in info]
        except (TypeError, KeyError):
            names = []
    if not names and hasattr(model, "stages"):
        names = [f"stages.{i}" for i in range(len(model.stages))]
    return [(n, model.get_submodule(n)) for n in names]


def family(model: nn.Module) -> str:
    """``"vheat"``, ``"waveformer"``, ``"hcnet"``, ``"pderesnet"`` or ``"other"`` (a WaveFormer is a VHeat with
    another operator: it is named for itself)."""

    for cls, name in ((WaveFormer, "waveformer"), (VHeat, "vheat"), (HcNet, "hcnet"), (PDEResNet, "pderesnet")):
        if isinstance(model, cls):
            return name
    return "other"


def to_display(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Normalised NCHW images to ``(B, H, W, 3)`` floats in [0, 1]."""
    m = torch.tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    return (images.detach().cpu() * s + m).clamp(0, 1).permute(0, 2, 3, 1).numpy()
