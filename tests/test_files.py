"""``pdevision._files``: what a path that is not a regular file is, in words; the one home of these checks."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

import pdevision.models._weights
from pdevision._files import file_kind, not_a_regular_file


def test_a_regular_or_missing_file_is_not_named(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    assert not_a_regular_file(tmp_path / "f.txt") is None
    assert not_a_regular_file(tmp_path / "missing") is None  # the caller's own message says it is missing


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs need a POSIX system")
def test_folders_fifos_and_sockets_are_named(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        named = {p: not_a_regular_file(tmp_path / p) for p in ("fifo", "sock")}
    assert named == {"fifo": "a FIFO", "sock": "a socket"}
    assert not_a_regular_file(tmp_path) == "a folder"
    assert not_a_regular_file("/dev/null") == "a device"


def test_file_kind_of_each_mode() -> None:
    kinds = {stat.S_IFDIR: "folder", stat.S_IFIFO: "FIFO", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}
    assert {mode: file_kind(mode) for mode in kinds} == kinds
    assert file_kind(stat.S_IFSOCK) == "socket"
    assert file_kind(0) == "special file"


def test_the_weights_module_keeps_no_copy() -> None:
    """The checks lived in the private ``models/_weights.py``; they are defined once, in ``pdevision._files``."""
    assert not hasattr(pdevision.models._weights, "file_kind")
    assert pdevision.models._weights.not_a_regular_file is not_a_regular_file
