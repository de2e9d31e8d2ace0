"""``pdevision._files``: what a path that is not a regular file is, in words; the one home of these checks."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

import pdevision.models._weights
from pdevision._files import file_kind, not_a_regular_file, replaced_atomically, write_atomically


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


# -- the one atomic write -------------------------------------------------------------------------------------------


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_text("old")
    write_atomically(target, "new")
    assert target.read_text() == "new"
    write_atomically(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "image.png"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half written"), replaced_atomically(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp != target  # same folder, same format
        tmp.write_text("half")
        raise RuntimeError("half written")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.png"]


def test_the_library_renames_files_over_others_in_one_place() -> None:
    """``os.replace`` of a written file appears only in ``_files`` (checkpoint folders swap whole folders in
    ``engine/save.py``, their own protocol with a backup and a recovery)."""
    src = Path(pdevision.models._weights.__file__).resolve().parents[1]
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if "os.replace(" in p.read_text())
    assert users == ["_files.py", "engine/save.py"]
