"""A restoration checkpoint applied to images: :func:`restore_image` (tiled with overlap above ``tile`` pixels a
side) and :func:`restore_file` (an image file in, one of the same size, mode and bit depth out)."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from pdevision._files import replaced_atomically
from pdevision.data.datasets import DataError
from pdevision.data.imageio import read_image_native
from pdevision.data.restoration import (
    to_tensor,
)
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import load_checkpoint_model
from pdevision.fastpath import on_device
from pdevision.models.factory import MAX_SIZE
from pdevision.models.restoration import create_restoration_model
from pdevision.tasks.restore.config import RESTORE_TASKS

log = logging.getLogger(__name__)


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
    return create_restoration_model(meta["model"], in_chans, patch, args)


def load_restoration_model(checkpoint: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict]:
    """The model of a restoration checkpoint (``RUN/best``, ``RUN/last`` or a run folder) and its metadata."""
    model, meta, _ = load_checkpoint_model(checkpoint, RESTORE_TASKS, restoration_model_from_meta)
    return on_device(model, device), meta


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
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with replaced_atomically(dst) as tmp:
            result.save(tmp)
    except (KeyError, ValueError, OSError) as exc:
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
