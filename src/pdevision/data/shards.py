"""WebDataset shards: ``DIR/train/*.tar`` and ``DIR/val/*.tar``, streamed with the ``webdataset`` package.

Each sample of a shard is ``KEY.jpg`` (or ``.jpeg``, ``.png``) with ``KEY.cls`` (the class index as text); an
optional ``DIR/classes.txt`` names the classes, one per line (otherwise they are named ``0``, ``1``, ...). The tars
are read as streams, never unpacked. The sample count comes from one pass over the tar headers at start-up (the
class indices are read too when there is no ``classes.txt``).

Splitting: the reading "slots" are the ranks times the loader workers. With at least as many shards as slots, each
slot reads its own shards; with fewer, each slot reads them all and keeps every ``slots``-th sample. Training:
the shard order of an epoch is a permutation seeded by ``seed + epoch``, each slot shuffles within a buffer seeded
by ``(seed, epoch, slot)``, and every rank yields the same number of samples (``total // world_size``: a rank whose
shards hold more stops there, one whose shards hold fewer reads them again), so data-parallel ranks take the same
number of steps. In one process with one worker an epoch is a permutation of all samples. Validation
reads every sample exactly once over all slots, in order.

What resume means for a stream: checkpoints are written at epoch ends; the next epoch's order depends only on the
seed, the epoch index and the slot, so a resumed run reads exactly the samples, in the same order, as an
uninterrupted one (with the same number of ranks and workers). Images are decoded by
:func:`pdevision.data.imageio.decode_rgb`, with the rules of every other input (16-bit scaled, EXIF orientation
applied). Unreadable images are skipped with a warning
(webdataset's handler), as unreadable files of a folder tree are: one corrupt JPEG among a million should not end a
week-long run; neither webdataset nor timm's readers report them otherwise.
"""

from __future__ import annotations

import io
import logging
import random
import tarfile
from collections.abc import Callable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import IterableDataset, get_worker_info

from pdevision._files import not_a_regular_file
from pdevision._optional import require
from pdevision.data.errors import DataError
from pdevision.data.imageio import decode_rgb

log = logging.getLogger(__name__)


def _wds() -> Any:
    """The ``webdataset`` package (the ``data`` extra), imported on use."""
    return require("webdataset", "data")


IMAGE_KEYS = ("jpg", "jpeg", "png")


def is_shard_folder(path: str | Path) -> bool:
    """True for a folder whose ``train/`` holds ``.tar`` files."""
    return any(Path(path, "train").glob("*.tar"))


def _scan(urls: list[str], read_labels: bool) -> tuple[int, int]:
    """Number of complete samples (image and class) in ``urls`` and the largest class index (-1 unread)."""
    count, top = 0, -1
    for url in urls:
        images, labels = set(), {}
        with tarfile.open(url, "r|") as tar:  # a stream: headers only, file bodies skipped
            for member in tar:
                key, _, ext = member.name.rpartition(".")
                if ext.lower() in IMAGE_KEYS:
                    images.add(key)
                elif ext == "cls":
                    handle = tar.extractfile(member) if read_labels else None
                    labels[key] = int(handle.read().decode().strip()) if handle is not None else -1
        complete = images & set(labels)
        count += len(complete)
        top = max([top, *(labels[k] for k in complete)])
    return count, top


def _decode_sample(sample: dict[str, Any]) -> tuple[Image.Image, int]:
    """``(8-bit RGB image, class index)`` of a raw shard sample, the image read by the reader of every task."""
    name = f"{sample.get('__url__', 'shard')}:{sample.get('__key__', '?')}"
    ext = next((k for k in IMAGE_KEYS if k in sample), None)
    if ext is None or "cls" not in sample:
        raise DataError(f"shard sample {name} lacks its image ({', '.join(IMAGE_KEYS)}) or its class (cls)")
    try:
        label = int(sample["cls"])
    except ValueError:
        raise DataError(f"shard sample {name}: the class {sample['cls'][:20]!r} is not an integer") from None
    return decode_rgb(sample[ext], f"{name}.{ext}"), label


def _warn(exc: Exception) -> bool:
    log.warning("skipping an unreadable shard sample (%s: %s)", type(exc).__name__, exc)
    return True


class ShardDataset(IterableDataset):
    """A stream of ``(image, class index)`` from WebDataset tar shards (see the module docstring)."""

    def __init__(
        self,
        urls: list[str],
        classes: list[str],
        count: int,
        transform: Callable | None = None,
        train: bool = True,
        seed: int = 0,
        buffer: int = 1000,
    ) -> None:
        _wds()  # a missing package is said here, not in a data loader's worker
        self.urls, self.classes, self.count = sorted(urls), classes, count
        self.transform, self.train, self.seed, self.buffer = transform, train, seed, buffer
        self.epoch = 0
        self.skipped: list[str] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _world(self) -> tuple[int, int]:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def __len__(self) -> int:
        """Samples this rank yields per epoch (training: ``count // world_size``)."""
        rank, world = self._world()
        if self.train:
            return self.count // world
        return len(range(rank, self.count, world))  # close to exact; validation reads every sample once

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        rank, world = self._world()
        worker = get_worker_info()
        wid, workers = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        slot, slots = rank * workers + wid, world * workers
        urls = list(self.urls)
        if self.train:
            random.Random(self.seed + self.epoch).shuffle(urls)
        if len(urls) >= slots:
            mine, keep = urls[slot::slots], None
        else:
            mine, keep = urls, (slot, slots)
        samples: Iterator[dict[str, Any]] = self._samples(mine, keep)
        if self.train:  # one shuffled pass over this slot's shards, then (unshuffled) repeats up to its quota
            rng = random.Random(f"{self.seed}-{self.epoch}-{slot}")
            samples = _wds().shuffle(self.buffer, initial=min(self.buffer, 100), rng=rng)(samples)
            per_rank = self.count // world
            quota = per_rank // workers + (wid < per_rank % workers)
            samples = islice(chain(samples, self._repeats(mine, keep)), quota)
        for image, label in _wds().map(_decode_sample, handler=_warn)(samples):
            yield (self.transform(image) if self.transform else image), label

    def _samples(self, urls: list[str], keep: tuple[int, int] | None) -> Iterator[dict[str, Any]]:
        """Raw samples of ``urls`` (of every ``keep[1]``-th from ``keep[0]``), one pass."""
        stream = _wds().tarfile_to_samples(handler=_warn)(iter([{"url": u} for u in urls]))
        for i, sample in enumerate(stream):
            if keep is None or i % keep[1] == keep[0]:
                yield sample

    def _repeats(self, urls: list[str], keep: tuple[int, int] | None) -> Iterator[dict[str, Any]]:
        """Further passes, for a slot whose shards hold fewer samples than its share of the epoch."""
        while urls:
            yield from self._samples(urls, keep)


def _classes(root: Path, top: int) -> list[str]:
    names_file = root / "classes.txt"
    what = not_a_regular_file(names_file)
    if what is not None:
        raise DataError(f"{names_file} is {what}, not a regular file; classes.txt must be a text file")
    if names_file.exists():
        names = [line.strip() for line in names_file.read_text().splitlines() if line.strip()]
        if top >= len(names):
            raise DataError(f"{names_file} names {len(names)} classes, the shards use class index {top}")
        return names
    return [str(i) for i in range(top + 1)]


def shard_datasets(
    root: str | Path,
    train_transform: Callable | None,
    val_transform: Callable | None,
    seed: int = 0,
    buffer: int = 1000,
) -> tuple[ShardDataset, ShardDataset]:
    """Train and validation streams of the shard folder ``root`` (``train/*.tar``, ``val/*.tar``)."""
    root = Path(root)
    splits = {}
    has_names = (root / "classes.txt").exists()  # not read here: _classes refuses a FIFO before reading it
    for split in ("train", "val"):
        urls = sorted(str(p) for p in (root / split).glob("*.tar"))
        if not urls:
            raise DataError(f"shard folder {root} has no {split}/*.tar")
        for url in urls:
            what = not_a_regular_file(url)
            if what is not None:
                raise DataError(f"shard {url} is {what}, not a regular file; a shard must be a tar file")
        try:
            splits[split] = (urls, *_scan(urls, read_labels=not has_names))
        except (tarfile.TarError, OSError, ValueError) as exc:
            raise DataError(f"cannot read the {split} shards of {root}: {exc}") from exc
        if splits[split][1] == 0:
            raise DataError(f"the {split} shards of {root} hold no KEY.jpg|jpeg|png + KEY.cls samples")
    classes = _classes(root, max(splits["train"][2], splits["val"][2]))
    train = ShardDataset(splits["train"][0], classes, splits["train"][1], train_transform, True, seed, buffer)
    val = ShardDataset(splits["val"][0], classes, splits["val"][1], val_transform, False, seed, 0)
    log.info("shards: %d train / %d val samples, %d classes", train.count, val.count, len(classes))
    return train, val


def write_shards(
    samples: list[tuple[Any, int]], folder: str | Path, per_shard: int, prefix: str = "shard"
) -> list[str]:
    """Write ``(PIL image, class)`` samples as PNG + cls tar shards of ``per_shard`` samples (``wds.ShardWriter``);
    returns the file names. For tests and small conversions of a folder tree."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pattern = str(folder / f"{prefix}-%05d.tar")
    with _wds().ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i, (image, label) in enumerate(samples):
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            sink.write({"__key__": f"{i:08d}", "png": buf.getvalue(), "cls": str(int(label)).encode()})
    return sorted(str(p) for p in folder.glob(f"{prefix}-*.tar"))


__all__ = ["ShardDataset", "is_shard_folder", "shard_datasets", "write_shards"]
