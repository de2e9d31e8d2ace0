"""Classification datasets: ImageFolder trees, and the entry point to the embedded sets.

Both yield ``(PIL.Image RGB, class index)`` so the same timm transforms apply, and expose
``classes`` (names) and ``targets`` (indices).

ImageFolder scans are safe on hostile trees:

* symbolic links are followed once per real path, only to targets inside the class folder they sit in
  or elsewhere inside the data root but outside every other class folder (never above the root, so
  ``ln -s .. cat/up`` cannot label dogs ``cat``); loops, dangling links and repeats are skipped,
  counted in ``skipped_links`` and reported in one warning;
* a class folder without readable images is dropped with a warning (it would otherwise become an
  output class that never appears in the data); ``dropped_classes`` names them;
* images are read by :func:`pdevision.data.imageio.open_rgb` (16-bit and float images scaled, not
  clipped); an image that fails at load time (e.g. with ``verify=False``) is skipped: the next
  readable sample is returned in its place, and the file is added to ``skipped`` with a warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from pdevision.data.digits import DigitsDataset
from pdevision.data.embedded import build_embedded, is_embedded
from pdevision.data.errors import DataError
from pdevision.data.imageio import IMAGE_EXTENSIONS, ImageReadError, open_rgb
from pdevision.data.splits import stratified_split

log = logging.getLogger(__name__)

# DataError, DigitsDataset and stratified_split live in the modules below this one and are re-exported here
__all__ = [
    "IMAGE_EXTENSIONS",
    "DataError",
    "DigitsDataset",
    "FolderDataset",
    "FolderScan",
    "build_datasets",
    "scan_folder",
    "stratified_split",
]


def _readable(path: Path) -> str | None:
    """``None`` if the file decodes completely as an image, else the reason it does not."""
    try:
        open_rgb(path)
    except ImageReadError as exc:
        return str(exc)
    return None


class FolderScan(tuple):
    """``(classes, samples, skipped)`` of :func:`scan_folder` (it unpacks as that triple), with what the
    scan left out: ``skipped_links`` (links not followed) and ``dropped_classes`` (class folders
    without readable images)."""

    skipped_links: list[str]
    dropped_classes: list[str]

    def __new__(
        cls,
        classes: list[str],
        samples: list[tuple[str, int]],
        skipped: list[str],
        skipped_links: Sequence[str] = (),
        dropped_classes: Sequence[str] = (),
    ) -> FolderScan:
        self = super().__new__(cls, (classes, samples, skipped))
        self.skipped_links = list(skipped_links)
        self.dropped_classes = list(dropped_classes)
        return self


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _class_files(
    class_dir: Path,
    root_real: Path,
    other_classes: list[Path],
    seen: set[Path],
    skipped_links: list[str],
    special: list[str],
) -> list[Path]:
    """Image files under ``class_dir``, links followed once per real path within the allowed region. Names with
    an image extension that are not regular files (a FIFO, a socket, a device) go to ``special``."""
    own = class_dir.resolve()

    def allowed(real: Path) -> bool:
        if _inside(real, own):
            return True
        return _inside(real, root_real) and real != root_real and not any(_inside(real, o) for o in other_classes)

    files: list[Path] = []
    folders = [class_dir]
    links: list[Path] = []  # followed after the real tree, so a real file always wins over a link to it
    while folders or links:
        if not folders:
            link = links.pop(0)
            try:
                real = link.resolve(strict=True)
            except (OSError, RuntimeError):  # dangling link, or a loop (l1 -> l2 -> l1)
                skipped_links.append(str(link))
                continue
            if not allowed(real) or real in seen:
                skipped_links.append(str(link))
                continue
            seen.add(real)
            if real.is_dir():
                folders.append(link)
            elif link.name.lower().endswith(IMAGE_EXTENSIONS):
                (files if real.is_file() else special).append(link)
            continue
        folder = folders.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            log.warning("cannot list %s (%s); skipped", folder, exc)
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                links.append(path)
                continue
            real = path.resolve()
            if real in seen:
                continue
            if entry.is_dir(follow_symlinks=False):
                seen.add(real)
                folders.append(path)
            elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                seen.add(real)
                (files if entry.is_file(follow_symlinks=False) else special).append(path)
    return sorted(files)


def scan_folder(root: Path, verify: bool = True) -> FolderScan:
    """Classes (sub-folder names), ``(path, class index)`` samples and skipped files of ``root``.

    With ``verify`` every file is decoded once; unreadable or truncated files are skipped with
    one warning each. Links and empty class folders: see the module notes.
    """
    root = Path(root)
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"data path {root} is not a folder")
    root_real = root.resolve()
    skipped_links: list[str] = []
    class_dirs: dict[str, Path] = {}
    for d in sorted(root.iterdir(), key=lambda p: p.name):
        if d.name.startswith(".") or not d.is_dir():
            continue
        real = d.resolve()
        if _inside(root_real, real) or real in class_dirs.values():  # the root, above it, or a duplicate
            skipped_links.append(str(d))
            continue
        class_dirs[d.name] = real
    found = sorted(class_dirs)
    if not found:
        raise DataError(f"data folder {root} has no class sub-folders (expected {root}/<class>/<image>)")
    seen: set[Path] = {root_real, *class_dirs.values()}
    per_class: dict[str, list[str]] = {}
    skipped: list[str] = []
    for name in found:
        others = [r for n, r in class_dirs.items() if n != name]
        kept = []
        special: list[str] = []
        for path in _class_files(root / name, root_real, others, seen, skipped_links, special):
            reason = _readable(path) if verify else None
            if reason is not None:
                log.warning("skipping unreadable image %s (%s)", path, reason)
                skipped.append(str(path))
                continue
            kept.append(str(path))
        for path in special:  # never opened: reading a FIFO blocks until something writes to it
            log.warning("skipping %s: not a regular file (a FIFO, socket or device)", path)
            skipped.append(str(path))
        per_class[name] = kept
    if skipped_links:
        log.warning(
            "%s: %d symbolic link(s) not followed (loops, repeats, dangling, or outside the data root or their "
            "class folder): %s%s",
            root,
            len(skipped_links),
            ", ".join(skipped_links[:5]),
            " ..." if len(skipped_links) > 5 else "",
        )
    dropped = [name for name in found if not per_class[name]]
    classes = [name for name in found if per_class[name]]
    if not classes:
        raise DataError(f"data folder {root} has no readable images in its class sub-folders {found}")
    if dropped:
        log.warning(
            "%s: class folder(s) %s hold no readable images and are dropped: %d classes remain",
            root,
            dropped,
            len(classes),
        )
    samples = [(path, index) for index, name in enumerate(classes) for path in per_class[name]]
    return FolderScan(classes, samples, skipped, skipped_links, dropped)


class FolderDataset(Dataset):
    """An ImageFolder tree ``root/<class>/<image>``; images are converted to 8-bit RGB by
    :func:`~pdevision.data.imageio.open_rgb`. ``indices`` selects a subset (for a split of one folder)."""

    def __init__(
        self,
        root: str | Path,
        transform: Callable | None = None,
        indices: Sequence[int] | None = None,
        scan: tuple[list[str], list[tuple[str, int]], list[str]] | None = None,
        verify: bool = True,
    ) -> None:
        self.root = Path(root)
        scan = scan or scan_folder(self.root, verify=verify)
        classes, samples, skipped = scan
        if indices is not None:
            samples = [samples[i] for i in indices]
        self.classes = classes
        self.samples = samples
        self.targets = [t for _, t in samples]
        self.skipped = list(skipped)
        self.skipped_links: list[str] = list(getattr(scan, "skipped_links", []))
        self.dropped_classes: list[str] = list(getattr(scan, "dropped_classes", []))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        for offset in range(len(self.samples)):
            path, target = self.samples[(index + offset) % len(self.samples)]
            try:
                rgb = open_rgb(path)
            except ImageReadError as exc:
                if path not in self.skipped:
                    self.skipped.append(path)
                    log.warning("skipping unreadable image at load time (%s); %d skipped", exc, len(self.skipped))
                continue
            return (self.transform(rgb) if self.transform else rgb), target
        raise DataError(f"none of the {len(self.samples)} images of {self.root} can be read")


def build_datasets(
    data: str | Path | None,
    img_size: int = 64,
    val_split: float = 0.2,
    train_transform: Callable | None = None,
    val_transform: Callable | None = None,
    verify: bool = True,
) -> tuple[Dataset, Dataset]:
    """Train and validation sets: the embedded digits when ``data`` is ``None``, an embedded set when it
    is one's name (:mod:`pdevision.data.embedded`; write ``./NAME`` for a folder of that name); otherwise
    an ImageFolder tree with ``train/`` and ``val/`` sub-folders, or one tree split ``val_split``."""
    if data is None or is_embedded(data):
        return build_embedded(str(data or "digits"), img_size, train_transform, val_transform)
    root = Path(data)
    if not root.exists():
        raise DataError(f"data folder {root} does not exist")
    if (root / "train").is_dir() and (root / "val").is_dir():
        train = FolderDataset(root / "train", train_transform, verify=verify)
        val = FolderDataset(root / "val", val_transform, verify=verify)
        if train.classes != val.classes:
            only_train = sorted(set(train.classes) - set(val.classes))
            only_val = sorted(set(val.classes) - set(train.classes))
            raise DataError(f"train and val class folders differ: only in train {only_train}, only in val {only_val}")
        return train, val
    scan = scan_folder(root, verify=verify)
    targets = [t for _, t in scan[1]]
    train_idx, val_idx = stratified_split(targets, val_split, seed=0)
    return (
        FolderDataset(root, train_transform, train_idx, scan=scan),
        FolderDataset(root, val_transform, val_idx, scan=scan),
    )
