"""An opt-in disk cache for the generated embedded sets (``scenes``, Pathfinder).

Unset (the default), nothing is written: each process draws the images it needs, and keeps them in memory. With
``PDEVISION_DATA_CACHE=DIR`` each split of a set, at each image size, is kept in ``DIR`` as one ``.npz`` file named
by the set, the split, the size and a digest of everything that sets its images (the set's specification, its
generator's version), so a later process loads it instead of drawing it again (the same arrays). A file is written
through a temporary name and a rename, so a process cut off mid-way leaves no half file; one that cannot be read is
drawn again and replaced. A cache folder that cannot be written is refused, in one line, before anything is drawn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pdevision._files import replaced_atomically
from pdevision.data.errors import DataError

ENV = "PDEVISION_DATA_CACHE"

Arrays = tuple[np.ndarray, np.ndarray]


def cache_folder() -> Path | None:
    """The folder of :data:`ENV`, created if needed; ``None`` when it is unset or empty."""
    root = os.environ.get(ENV, "")
    if not root:
        return None
    folder = Path(root).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise DataError(
            f"{ENV}={root} is not a folder this process can write ({exc.strerror or exc}); "
            f"give a writable folder, or unset it to keep generated sets in memory only"
        ) from None
    return folder


def digest(spec: Any, **fields: Any) -> str:
    """16 hex digits of the JSON of ``spec`` (a dataclass: all its fields, nested ones too) and ``fields``."""
    content = {"spec": dataclasses.asdict(spec), **fields}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def cached(stem: str, key: str, shape: tuple[int, ...], make: Callable[[], Arrays]) -> Arrays:
    """``make()``'s images and labels, through the cache when :data:`ENV` is set: loaded from
    ``{stem}-{key}.npz`` when that file holds images of ``shape`` (uint8) and one label per image, else drawn
    and written there."""
    folder = cache_folder()
    if folder is None:
        return make()
    path = folder / f"{re.sub(r'[^A-Za-z0-9._-]', '_', stem)}-{key}.npz"
    loaded = _read(path, shape)
    if loaded is not None:
        return loaded
    images, labels = make()
    try:
        with replaced_atomically(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, images=images, labels=labels)
    except OSError as exc:
        raise DataError(f"{ENV}: cannot write {path.name} ({exc.strerror or exc}); free space or unset it") from None
    return images, labels


def _read(path: Path, shape: tuple[int, ...]) -> Arrays | None:
    """The arrays of a cache file, or ``None`` when it is missing, cannot be read or does not hold what was asked."""
    try:
        with np.load(path, allow_pickle=False) as f:
            images, labels = f["images"], f["labels"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # a damaged file: drawn again and replaced
    if images.shape != shape or images.dtype != np.uint8 or labels.shape != shape[:1]:
        return None
    return images, labels


__all__ = ["ENV", "cache_folder", "cached", "digest"]
