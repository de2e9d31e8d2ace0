"""Filesystem checks for paths a user or a checkpoint names: what a path that is not a regular file is, in words, and
where a command may write.

Opening a FIFO for reading waits for a writer forever and a device may never end, so every reader of a file it
expects to be regular asks first. :func:`replaced_atomically` is the library's one atomic write: a file is written
under a temporary name beside its destination and renamed over it, so a reader never sees half a file and a failed
write leaves what was there. A command's output never goes inside a run folder or a checkpoint folder
(:func:`inside_library_folder`): the next save of a checkpoint replaces its folder whole, and a run's folder is the
training loop's. They import nothing of the library (the lowest layer of the import contract)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CHECKPOINT_NAMES",
    "file_kind",
    "inside_library_folder",
    "is_run_folder",
    "not_a_regular_file",
    "replaced_atomically",
    "why_not_writable",
    "write_atomically",
]

# the checkpoint folders of a run, and the temporary and previous folders of their saves (pdevision.engine.save)
CHECKPOINT_NAMES = ("last", "best", "encoder")
_SAVE_SIBLING = re.compile(r"^\.(last|best|encoder)\.(old|tmp-.*)$")
# what the training loop writes into a run folder beside its config.json
_RUN_MARKS = (*CHECKPOINT_NAMES, "summary.json", "metrics.csv", ".last.old", ".best.old", ".encoder.old")


def file_kind(mode: int) -> str:
    """What a file that is not regular is, in words, from its ``st_mode``."""
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def not_a_regular_file(path: str | Path) -> str | None:
    """What ``path`` is in words (``"a FIFO"``, ``"a device"``, ``"a folder"``, ``"a socket"``) when it exists and is
    not a regular file, else ``None``. Opening a FIFO for reading waits for a writer forever, a device may never end:
    every path that opens a file it expects to be regular asks this first (a missing file: the caller's own message).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"a {file_kind(mode)}"


@contextlib.contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same folder, same suffix, so a writer that picks a format by the extension
    picks the same) for the block to write; when the block ends it is renamed over ``path`` in one step
    (``os.replace``), when the block raises it is removed and ``path`` is left as it was. The name holds the process
    id and a random token, so writers in several processes never share one. Not fsynced: atomic against a failed or
    killed writer, not against a power cut."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # (its folder may not exist: the error raised says why)
            tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through :func:`replaced_atomically`."""
    with replaced_atomically(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)


def why_not_writable(folder: str | Path) -> str | None:
    """Why files cannot be created in the existing ``folder`` (read-only permissions, an immutable folder, a
    read-only mount), in words, or ``None`` where they can: found by creating and removing a file, as a writer
    would."""
    probe = Path(folder) / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def is_run_folder(folder: str | Path) -> bool:
    """Whether ``folder`` holds a run: its ``config.json`` beside a checkpoint, ``summary.json`` or ``metrics.csv``."""
    folder = Path(folder)
    return (folder / "config.json").is_file() and any((folder / mark).exists() for mark in _RUN_MARKS)


def inside_library_folder(path: str | Path) -> str | None:
    """Why ``path`` may not be written, or ``None``: it is (or lies inside) a checkpoint folder (one holding
    ``model.safetensors``, a save's temporary or previous folder, ``RUN/last``, ``RUN/best`` or ``RUN/encoder``),
    whose next save replaces it whole; or it lies inside a run folder (:func:`is_run_folder`), the training loop's."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        in_run = folder.name in CHECKPOINT_NAMES and any(
            (folder.parent / name).is_file() for name in ("config.json", "summary.json")
        )
        if in_run or _SAVE_SIBLING.match(folder.name) or (folder / "model.safetensors").is_file():
            return (
                f"is inside the checkpoint folder {folder}, which the next save replaces whole (deleting what is "
                "written there)"
            )
        if folder != path and is_run_folder(folder):
            return f"is inside the run folder {folder}, which belongs to its training run"
    return None
