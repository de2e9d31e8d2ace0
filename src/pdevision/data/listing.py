"""The image files a command is given: files as named, folders walked (an ImageFolder tree ``val/<class>/*.png``
among them), in a deterministic order.

A folder is walked through all its sub-folders, each real folder once: a link to a folder walked already, or to
one that holds the folder given (a loop such as ``ln -s .. val/up``), is not entered, so a walk always ends. Names
with an image extension (:data:`~pdevision.data.imageio.IMAGE_EXTENSIONS`) that are not regular files (a FIFO, a
socket, a dangling link, a link loop) are never opened: they are left out and counted in one warning per folder
given. An image below a sub-folder of a folder given carries that sub-folder's name (:attr:`ListedImage.folder`),
which names its class in an ImageFolder tree.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pdevision.data.imageio import IMAGE_EXTENSIONS

log = logging.getLogger(__name__)

__all__ = ["ListedImage", "list_images"]


class ListedImage(NamedTuple):
    """An image file to read, and the first-level sub-folder of the folder given that holds it (``None`` for a file
    named itself, or one directly inside a folder given): its class in an ImageFolder tree."""

    path: Path
    folder: str | None = None


def _walk(root: Path) -> tuple[list[ListedImage], list[str]]:
    """The image files under ``root`` sorted by their path below it, and the names (relative to ``root``) of the
    entries named like images that are not regular files."""
    found: list[tuple[tuple[str, ...], Path]] = []
    skipped: list[str] = []
    seen: set[Path] = set()
    top = root.resolve()
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            real = folder.resolve(strict=True)
        except (OSError, RuntimeError):  # gone meanwhile, or a loop of links
            skipped.append(os.path.relpath(folder, root))
            continue
        if real in seen or (real != top and top.is_relative_to(real)):  # a loop, or the same images twice
            log.info("%s leads to %s, a folder walked already or one above the folder given; not walked", folder, real)
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            log.warning("cannot list %s (%s); skipped", folder, exc.strerror or exc)
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()  # follows links
            except OSError:
                is_dir = False
            if is_dir:
                folders.append(path)
            elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                parts = path.relative_to(root).parts
                try:
                    regular = entry.is_file()  # follows links: a dangling one or a loop is not a file
                except OSError:
                    regular = False
                if regular:
                    found.append((parts, path))
                else:
                    skipped.append(os.path.join(*parts))
    found.sort(key=lambda item: item[0])
    return [ListedImage(path, parts[0] if len(parts) > 1 else None) for parts, path in found], sorted(skipped)


def list_images(items: Iterable[str | Path | ListedImage]) -> list[ListedImage]:
    """The image files of ``items``: a file as given (read or refused when it is opened), a folder replaced by the
    image files in it and in all its sub-folders (sorted by their path below it), an already listed image kept.
    A folder without any image file is a :class:`FileNotFoundError`."""
    out: list[ListedImage] = []
    for item in items:
        if isinstance(item, ListedImage):
            out.append(item)
            continue
        path = Path(item)
        if not path.is_dir():
            out.append(ListedImage(path))
            continue
        found, skipped = _walk(path)
        if skipped:  # a FIFO, socket, device or dangling link with an image's name: never opened
            log.warning(
                "skipped %d entr%s of %s named like images that are not image files (FIFO, dangling link, "
                "link loop, ...): %s",
                len(skipped),
                "y" if len(skipped) == 1 else "ies",
                path,
                ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""),
            )
        if not found:
            raise FileNotFoundError(
                f"folder {path} holds no image files ({', '.join(IMAGE_EXTENSIONS)}), in it or in its sub-folders"
            )
        out.extend(found)
    return out
