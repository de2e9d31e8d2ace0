"""Reading an image file as 8-bit RGB, whatever its bit depth: one helper for datasets and prediction.

Pillow's ``convert("RGB")`` clips 16-bit and 32-bit integer images at 255 (a uint16 PNG turns almost
white) and truncates float images to 0 or 1 (a float TIFF in [0, 1] turns black). Here:

* 16-bit grey (modes ``I;16*``, as Pillow opens 16-bit PNG and TIFF): scaled by 255/65535;
* 32-bit integer grey (mode ``I``): taken as 16-bit data (values in [0, 65535], scaled the same way);
  values outside that range are refused, since their full scale is unknown;
* float grey (mode ``F``): values in [0, 1] scaled by 255; other ranges and non-finite values are
  refused (the file does not say what its full scale is);
* palette images with transparency go through RGBA, every other mode through ``convert("RGB")``.

Files that do not decode, and decompression bombs (Pillow's ``DecompressionBombError``, more than
twice ``Image.MAX_IMAGE_PIXELS``), raise :class:`ImageReadError` with one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


class ImageReadError(ValueError):
    """An image file that cannot be used: unreadable, truncated, too large, or of an unknown value range."""


def to_rgb(img: Image.Image, name: str = "image") -> Image.Image:
    """``img`` as 8-bit RGB, high-bit-depth and float images scaled (see the module notes)."""
    mode = img.mode
    if mode.startswith("I;16") or mode in ("I", "F"):
        values = np.asarray(img)
        if mode == "F":
            if not np.isfinite(values).all():
                raise ImageReadError(f"{name}: float image with NaN or infinite values")
            lo, hi = float(values.min()), float(values.max())
            if lo < 0.0 or hi > 1.0:
                raise ImageReadError(
                    f"{name}: float image with values in [{lo:g}, {hi:g}]; only [0, 1] has a known scale "
                    "(convert it to 8- or 16-bit first)"
                )
            scaled = values.astype(np.float64) * 255.0
        else:
            lo, hi = int(values.min()), int(values.max())
            if lo < 0 or hi > 65535:
                raise ImageReadError(
                    f"{name}: 32-bit integer image with values in [{lo}, {hi}], outside the 16-bit range "
                    "(convert it to 8- or 16-bit first)"
                )
            scaled = values.astype(np.float64) * (255.0 / 65535.0)
        return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "L").convert("RGB")
    if mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    return img.convert("RGB")


def open_rgb(path: str | Path) -> Image.Image:
    """Decode ``path`` completely and return it as 8-bit RGB; :class:`ImageReadError` otherwise."""
    path = Path(path)
    if not path.exists():
        raise ImageReadError(f"image {path} does not exist")
    if not path.is_file():
        raise ImageReadError(f"{path} is not a file")
    try:
        with Image.open(path) as img:
            img.load()
            return to_rgb(img, str(path))
    except ImageReadError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageReadError(f"image {path} is too large to decode safely ({exc})") from exc
    except (OSError, SyntaxError, ValueError, EOFError, MemoryError, Image.UnidentifiedImageError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ImageReadError(f"cannot read image {path}: {text}") from exc
