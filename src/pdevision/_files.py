"""Filesystem checks for paths a user or a checkpoint names: what a path that is not a regular file is, in words.

Opening a FIFO for reading waits for a writer forever and a device may never end, so every reader of a file it
expects to be regular asks first. They import nothing of the library (the lowest layer of the import contract)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["file_kind", "not_a_regular_file"]


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
