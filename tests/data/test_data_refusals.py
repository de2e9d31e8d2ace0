"""Hostile data folders (issue 16): symbolic-link loops (defect 1), 16-bit and float images (defect 5),
empty class folders (defect 7), unreadable files found only at load time (defect 12)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pdevision.data import FolderDataset, build_datasets, scan_folder


def _image(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (value, value, value)).save(path)


def _scan_with_deadline(root: Path) -> FolderDataset:
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(ds=FolderDataset(root)), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the scan did not finish in 60 s"
    return result["ds"]  # type: ignore[return-value]


def test_symlink_loops_are_followed_once_and_never_above_the_root(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data" / "train"
    for i in range(3):
        _image(root / "cat" / f"c{i}.png", 10 + i)
        _image(root / "dog" / f"d{i}.png", 100 + i)
    _image(root / ".pool" / "p0.png", 200)  # a hidden folder inside the root: a legitimate link target
    _image(root / ".pool" / "p1.png", 201)
    _image(tmp_path / "elsewhere" / "e0.png", 250)  # above the root
    os.symlink("..", root / "cat" / "up")  # the root: would label dogs "cat"
    os.symlink(".", root / "dog" / "self")  # a loop
    os.symlink("l2", root / "cat" / "l1")  # a pair pointing at each other
    os.symlink("l1", root / "cat" / "l2")
    os.symlink("../.pool", root / "cat" / "pooled")  # followed: inside the root, no class folder
    os.symlink(tmp_path / "elsewhere", root / "dog" / "outside")
    os.symlink("d0.png", root / "dog" / "again.png")  # the same real file twice
    os.symlink("../cat/c0.png", root / "dog" / "stolen.png")  # another class's image
    with caplog.at_level(logging.WARNING):
        ds = _scan_with_deadline(root)
    assert ds.classes == ["cat", "dog"]
    labels = {Path(p).name: ds.classes[t] for p, t in ds.samples}
    assert labels == {
        "c0.png": "cat",
        "c1.png": "cat",
        "c2.png": "cat",
        "p0.png": "cat",
        "p1.png": "cat",
        "d0.png": "dog",
        "d1.png": "dog",
        "d2.png": "dog",
    }
    assert len(ds.samples) == 8
    skipped = sorted(Path(p).name for p in ds.skipped_links)
    assert skipped == ["again.png", "l1", "l2", "outside", "self", "stolen.png", "up"]
    assert "7 symbolic link(s) not followed" in caplog.text


def test_class_folder_link_to_the_root_is_not_a_class(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _image(root / "a" / "0.png", 1)
    _image(root / "a" / "1.png", 2)
    os.symlink(".", root / "loop")  # a "class" that is the root itself
    os.symlink("a", root / "a_again")  # the same real folder as another class
    classes, samples, _ = scan_folder(root)
    assert classes == ["a"] and len(samples) == 2


def test_empty_class_folder_is_dropped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "data"
    for c in ("ant", "bee"):
        for i in range(2):
            _image(root / c / f"{i}.png", 40 * i)
    (root / "empty").mkdir()
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("no images here")
    with caplog.at_level(logging.WARNING):
        train, val = build_datasets(root, val_split=0.5)
    assert train.classes == val.classes == ["ant", "bee"]
    assert sorted(set(train.targets)) == [0, 1]
    assert train.dropped_classes == ["empty", "notes"]
    assert "['empty', 'notes'] hold no readable images and are dropped: 2 classes remain" in caplog.text


def test_16_bit_and_float_images_are_scaled_not_clipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "data"
    (root / "x").mkdir(parents=True)
    rng = np.random.default_rng(0)
    u16 = rng.integers(0, 65536, size=(16, 16), dtype=np.uint16)
    f32 = rng.random((16, 16), dtype=np.float32)
    Image.fromarray(u16).save(root / "x" / "a_u16.png")
    Image.fromarray(f32).save(root / "x" / "b_float.tif")
    Image.fromarray(f32 * 7.0).save(root / "x" / "c_float_unknown_scale.tif")  # refused: skipped at the scan
    with caplog.at_level(logging.WARNING):
        ds = FolderDataset(root)
    assert [Path(p).name for p, _ in ds.samples] == ["a_u16.png", "b_float.tif"]
    assert [Path(p).name for p in ds.skipped] == ["c_float_unknown_scale.tif"]
    assert "only [0, 1] has a known scale" in caplog.text
    got16 = np.asarray(ds[0][0]).astype(int)
    gotf = np.asarray(ds[1][0]).astype(int)
    want16 = np.floor(u16.astype(np.float64) / 65535.0 * 255.0 + 0.5).astype(int)  # independent reference
    wantf = np.floor(f32.astype(np.float64) * 255.0 + 0.5).astype(int)
    for got, want in ((got16, want16), (gotf, wantf)):
        assert got.shape == (16, 16, 3) and (got[..., 0] == got[..., 2]).all()
        assert np.abs(got[..., 0] - want).max() <= 1


def test_unreadable_images_without_verification_are_skipped_at_load_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data"
    _image(root / "a" / "0.png", 10)
    (root / "a" / "1.png").write_bytes(b"\x89PNG not really")
    _image(root / "a" / "2.png", 30)
    ds = FolderDataset(root, verify=False)
    assert len(ds) == 3 and ds.skipped == []
    with caplog.at_level(logging.WARNING):
        img, target = ds[1]  # the broken file: the next readable image instead
    assert np.asarray(img)[0, 0, 0] == 30 and target == 0
    assert ds.skipped == [str(root / "a" / "1.png")]
    assert "skipping unreadable image at load time" in caplog.text and "1 skipped" in caplog.text
    (root / "a" / "0.png").write_bytes(b"")
    (root / "a" / "2.png").write_bytes(b"")
    with pytest.raises(ValueError, match="none of the 3 images"):
        ds[0]
