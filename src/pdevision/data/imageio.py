"""The one image reader of every task: classification, segmentation, detection, restoration, prediction.

Pillow's ``convert("RGB")`` clips 16-bit and 32-bit integer images at 255 (a uint16 PNG turns almost
white) and truncates float images to 0 or 1 (a float TIFF in [0, 1] turns black). Here, for every reader:

* 16-bit grey (modes ``I;16*``, as Pillow opens 16-bit PNG and TIFF): scaled by 255/65535;
* 32-bit integer grey (mode ``I``): taken as 16-bit data (values in [0, 65535], scaled the same way);
  values outside that range are refused, since their full scale is unknown;
* float grey (mode ``F``): values in [0, 1] scaled by 255; other ranges and non-finite values are
  refused (the file does not say what its full scale is);
* palette images with transparency go through RGBA, every other mode (CMYK, LA, RGBA, 1, ...) through
  ``convert("RGB")`` (an alpha channel is dropped, not composited);
* the EXIF orientation is applied (``PIL.ImageOps.exif_transpose``): pixels come upright, as viewers show them;
* a path that exists but is not a regular file (a folder, a FIFO, a device) is refused before it is opened
  (reading a FIFO would wait forever), and the file is opened non-blocking and checked again once open;
* files that do not decode, empty images, and decompression bombs (Pillow's ``DecompressionBombError``, more
  than twice ``Image.MAX_IMAGE_PIXELS``) are refused.

Every refusal is an :class:`ImageReadError` (a :class:`~pdevision.data.errors.DataError`, so a ``ValueError``)
with one line naming the file.

The API: :func:`open_rgb` (8-bit RGB PIL image), :func:`read_rgb_array` (uint8 ``(H, W, 3)``),
:func:`read_image_native` (float32 pixels in [0, 1] in the file's own mode and scale, for restoration),
:func:`read_mask_array` (a one-channel class-index image as integers, unscaled), :func:`read_header`
(upright size and mode without decoding the pixels), :func:`decode_rgb` (bytes, e.g. from a tar shard, as
8-bit RGB) and :func:`to_rgb` (an already open PIL image as 8-bit RGB).
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NamedTuple, TypeVar

import numpy as np
from PIL import Image, ImageOps

from pdevision._files import file_kind
from pdevision.data.errors import DataError

__all__ = [
    "IMAGE_EXTENSIONS",
    "MASK_MODES",
    "NATIVE_MODES",
    "ImageReadError",
    "NativeImage",
    "decode_rgb",
    "open_rgb",
    "read_header",
    "read_image_native",
    "read_mask_array",
    "read_rgb_array",
    "to_rgb",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
# modes :func:`read_image_native` keeps (``I`` and the ``I;16*`` variants are all returned as ``"I;16"``)
NATIVE_MODES = ("L", "LA", "RGB", "RGBA", "I;16")
# one-channel integer modes a class-index mask may have
MASK_MODES = ("L", "P", "I", "I;16", "I;16L", "I;16B", "I;16N")
_EXIF_ORIENTATION = 0x0112
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, MemoryError, Image.UnidentifiedImageError)
T = TypeVar("T")


class ImageReadError(DataError):
    """An image file that cannot be used: unreadable, truncated, too large, or of an unknown value range."""


class NativeImage(NamedTuple):
    """An image in its own mode: the upright PIL image, float32 pixels in [0, 1], its mode, its integer scale."""

    image: Image.Image
    array: np.ndarray
    mode: str
    scale: float


@contextmanager
def _regular_file(path: Path) -> Iterator[IO[bytes]]:
    """``path`` opened for reading if it is a regular file; a folder, FIFO or device is never waited on."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ImageReadError(f"image {path} does not exist") from None
    except OSError as exc:
        raise ImageReadError(f"cannot read image {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ImageReadError(f"{path} is not a file but a {file_kind(st.st_mode)}; an image must be a regular file")
    try:  # non-blocking, and checked again once open: the path may have been swapped for a FIFO meanwhile
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ImageReadError(f"cannot read image {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ImageReadError(f"{path} is not a file but a {file_kind(st.st_mode)}; an image must be a regular file")
        yield handle


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _upright(img: Image.Image) -> Image.Image:
    """``img`` (loaded) with its EXIF orientation applied; unchanged without one."""
    if img.getexif().get(_EXIF_ORIENTATION, 1) in (None, 1):
        return img
    return ImageOps.exif_transpose(img)


def _decoded(source: IO[bytes], name: str, then: Callable[[Image.Image], T]) -> T:
    """``then`` of the fully decoded, upright image read from ``source``; errors name ``name``."""
    try:
        with Image.open(source) as img:
            img.load()
            if 0 in img.size:
                raise ImageReadError(f"image {name} has no pixels ({img.size[0]}x{img.size[1]})")
            return then(_upright(img))
    except ImageReadError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageReadError(f"image {name} is too large to decode safely ({exc})") from exc
    except (
        Image.UnidentifiedImageError
    ) as exc:  # Pillow names its file object (<_io.BufferedReader name=3>), not the file
        raise ImageReadError(f"cannot read image {name}: not an image format Pillow knows") from exc
    except _DECODE_ERRORS as exc:
        raise ImageReadError(f"cannot read image {name}: {_one_line(exc)}") from exc


def _read(path: str | Path, then: Callable[[Image.Image], T]) -> T:
    """``then`` of the decoded, upright image at ``path`` (a regular file)."""
    path = Path(path)
    with _regular_file(path) as handle:
        return _decoded(handle, str(path), then)


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
    """Decode ``path`` completely and return it upright as 8-bit RGB; :class:`ImageReadError` otherwise."""
    return _read(path, lambda img: to_rgb(img, str(path)))


def read_rgb_array(path: str | Path) -> np.ndarray:
    """The image at ``path`` as an upright uint8 ``(H, W, 3)`` array (:func:`open_rgb`'s pixels)."""
    return np.array(open_rgb(path), dtype=np.uint8)


def decode_rgb(data: bytes, name: str) -> Image.Image:
    """Encoded image bytes (``name`` says where they came from) as upright 8-bit RGB, by :func:`open_rgb`'s rules."""
    return _decoded(io.BytesIO(data), name, lambda img: to_rgb(img, name))


def _native(img: Image.Image, name: str, caller: str) -> NativeImage:
    """``img`` in its own mode (see :func:`read_image_native`)."""
    mode = img.mode
    if mode == "I" or mode.startswith("I;16"):
        values = np.asarray(img)
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi > 65535:
            raise ImageReadError(
                f"{name}: 32-bit integer image with values in [{lo}, {hi}], outside the 16-bit range "
                "(convert it to 8 or 16 bits first)"
            )
        return NativeImage(img, values.astype(np.float32) / np.float32(65535.0), "I;16", 65535.0)
    if mode not in NATIVE_MODES:
        raise ImageReadError(
            f"{name} is a {mode} image; {caller} supports L, LA, RGB, RGBA and 16-bit grey (convert it first)"
        )
    return NativeImage(img, np.asarray(img, dtype=np.float32) / np.float32(255.0), mode, 255.0)


def read_image_native(path: str | Path, caller: str = "the native reader") -> NativeImage:
    """The upright image at ``path`` in its own mode: ``(image, float32 pixels in [0, 1], mode, scale)``.

    Modes L, LA, RGB and RGBA keep their channels (scale 255); 16-bit grey (``I;16*``, and ``I`` holding
    values in 0..65535) is returned as mode ``"I;16"`` on the 0..65535 scale. Other modes (palette, float,
    CMYK, 1-bit) raise :class:`ImageReadError` saying ``caller`` supports only those."""
    return _read(path, lambda img: _native(img, str(path), caller))


def _mask(img: Image.Image, name: str) -> np.ndarray:
    if img.mode not in MASK_MODES:
        raise ImageReadError(f"{name}: a mask must be a one-channel PNG of class indices, got mode {img.mode}")
    return np.asarray(img).astype(np.int64)


def read_mask_array(path: str | Path) -> np.ndarray:
    """A one-channel image of class indices (modes L, P, I, I;16) as an upright int64 ``(H, W)`` array, unscaled."""
    return _read(path, lambda img: _mask(img, str(path)))


def read_header(path: str | Path) -> tuple[tuple[int, int], str]:
    """``((width, height), mode)`` of the image at ``path`` as it will be read (EXIF rotations swap the sides),
    from its header only."""
    path = Path(path)
    with _regular_file(path) as handle:
        try:
            with Image.open(handle) as img:
                (w, h), mode = img.size, img.mode
                # Pillow decodes a whole PNG to look for an eXIf chunk after its pixels: only one before them counts
                header_exif = img.format != "PNG" or "exif" in img.info
                if header_exif and img.getexif().get(_EXIF_ORIENTATION, 1) in (5, 6, 7, 8):  # turned by 90 degrees
                    w, h = h, w
                return (w, h), mode
        except Image.DecompressionBombError as exc:
            raise ImageReadError(f"image {path} is too large to decode safely ({exc})") from exc
        except _DECODE_ERRORS as exc:
            raise ImageReadError(f"cannot read image {path}: {_one_line(exc)}") from exc
