"""One image reader for every task: the same file gives the same 8-bit RGB pixels through the classification,
segmentation, detection and restoration inputs (16-bit grey, EXIF-rotated JPEG, CMYK, palette with
transparency, LA), and a FIFO is refused at once by each of them instead of blocking the reader."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from pdevision.data import DataError, FolderDataset, ImageReadError, open_rgb, read_image_native, read_rgb_array
from pdevision.data.dense import CocoDetection, MaskFolder
from pdevision.data.imageio import decode_rgb, read_header, read_mask_array
from pdevision.data.restoration import folder_images, load_image
from pdevision.data.shards import ShardDataset

H, W = 24, 40  # not square: a rotation shows in the shape


def _classification(src: Path, root: Path) -> np.ndarray:
    (root / "cls").mkdir(parents=True)
    shutil.copy(src, root / "cls" / src.name)
    ds = FolderDataset(root)
    assert [Path(p).name for p, _ in ds.samples] == [src.name]
    return np.asarray(ds[0][0])


def _segmentation(src: Path, root: Path) -> np.ndarray:
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    shutil.copy(src, root / "images" / src.name)
    (w, h), _ = read_header(src)
    Image.fromarray(np.zeros((h, w), np.uint8)).save(root / "masks" / f"{src.stem}.png")
    (root / "classes.txt").write_text("background\n")
    image, mask = MaskFolder(root, "train")[0]  # no transform: the uint8 image before normalisation
    assert tuple(mask.shape) == (h, w)
    return image.permute(1, 2, 0).numpy()


def _detection(src: Path, root: Path) -> np.ndarray:
    (root / "annotations").mkdir(parents=True)
    (root / "train2017").mkdir()
    shutil.copy(src, root / "train2017" / src.name)
    (w, h), _ = read_header(src)
    data = {
        "images": [{"id": 1, "file_name": src.name, "height": h, "width": w}],
        "annotations": [],
        "categories": [{"id": 1, "name": "thing"}],
    }
    (root / "annotations" / "instances_train.json").write_text(json.dumps(data))
    image, target = CocoDetection(root, "train")[0]
    assert len(target["labels"]) == 0
    return image.permute(1, 2, 0).numpy()


def _restoration(src: Path, root: Path) -> np.ndarray:
    root.mkdir(parents=True)
    shutil.copy(src, root / src.name)
    Image.new("RGB", (8, 8)).save(root / "other.png")
    images = folder_images(root, mode="RGB")
    assert str(root / src.name) in images.train + images.test
    from_folder = images.load(str(root / src.name))
    direct = load_image(src, "RGB")
    np.testing.assert_array_equal(from_folder, direct)
    return np.rint(direct * 255.0).astype(np.uint8)


INPUTS: dict[str, Callable[[Path, Path], np.ndarray]] = {
    "classification": _classification,
    "segmentation": _segmentation,
    "detection": _detection,
    "restoration": _restoration,
}


def _through_every_input(src: Path, tmp_path: Path) -> np.ndarray:
    """The pixels of ``src`` through each task's input; they must all be the same array, which is returned."""
    ref = read_rgb_array(src)
    assert ref.dtype == np.uint8 and ref.ndim == 3 and ref.shape[2] == 3
    np.testing.assert_array_equal(np.asarray(open_rgb(src)), ref)
    np.testing.assert_array_equal(np.asarray(decode_rgb(src.read_bytes(), src.name)), ref)
    for name, read in INPUTS.items():
        got = read(src, tmp_path / name)
        assert got.dtype == np.uint8, name
        np.testing.assert_array_equal(got, ref, err_msg=name)
    return ref


def _rgb() -> np.ndarray:
    """A smooth, asymmetric colour image (JPEG keeps it close; flips and rotations change it)."""
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([x * 255 // (W - 1), y * 255 // (H - 1), (x + 2 * y) * 255 // (W - 1 + 2 * (H - 1))], -1)
    return img.astype(np.uint8)


def test_16_bit_grey_is_scaled_the_same_way_by_every_input(tmp_path: Path) -> None:
    values = np.linspace(0, 65535, H * W).round().astype(np.uint16).reshape(H, W)
    assert values.min() == 0 and values.max() == 65535
    src = tmp_path / "grey16.png"
    Image.fromarray(values).save(src)
    assert Image.open(src).mode.startswith("I;16")
    got = _through_every_input(src, tmp_path)
    want = np.floor(values.astype(np.float64) * 255.0 / 65535.0 + 0.5).astype(np.uint8)  # scaled, not clipped
    np.testing.assert_array_equal(got, np.repeat(want[..., None], 3, axis=2))
    # the restore command's reader keeps the 16 bits and says so
    native = read_image_native(src)
    assert native.mode == "I;16" and native.scale == 65535.0 and native.array.dtype == np.float32
    np.testing.assert_allclose(native.array, values / 65535.0, atol=1e-7)


def test_exif_rotated_jpeg_is_upright_in_every_input(tmp_path: Path) -> None:
    src = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    Image.fromarray(_rgb()).save(src, quality=95, exif=exif)
    assert Image.open(src).size == (W, H)  # stored sideways
    assert read_header(src) == ((H, W), "RGB")  # the size as read: upright
    got = _through_every_input(src, tmp_path)
    assert got.shape == (W, H, 3)
    with Image.open(src) as img:
        np.testing.assert_array_equal(got, np.asarray(ImageOps.exif_transpose(img).convert("RGB")))
    native = read_image_native(src)
    assert native.mode == "RGB" and native.array.shape == (W, H, 3)
    np.testing.assert_allclose(native.array, got / 255.0, atol=1e-7)


def test_cmyk_jpeg_reads_the_same_everywhere(tmp_path: Path) -> None:
    src = tmp_path / "cmyk.jpg"
    Image.fromarray(_rgb()).convert("CMYK").save(src, quality=95)
    assert Image.open(src).mode == "CMYK"
    got = _through_every_input(src, tmp_path)
    with Image.open(src) as img:
        np.testing.assert_array_equal(got, np.asarray(img.convert("RGB")))
    with pytest.raises(ImageReadError, match=r"cmyk\.jpg is a CMYK image; restore supports L, LA, RGB"):
        read_image_native(src, caller="restore")


def test_palette_png_with_transparency_goes_through_rgba(tmp_path: Path) -> None:
    src = tmp_path / "palette.png"
    img = Image.fromarray(_rgb()).quantize(8)
    img.save(src, transparency=0)
    with Image.open(src) as check:
        assert check.mode == "P" and "transparency" in check.info
        want = np.asarray(check.convert("RGBA").convert("RGB"))
    got = _through_every_input(src, tmp_path)
    np.testing.assert_array_equal(got, want)


def test_la_png_drops_its_alpha_the_same_way_everywhere(tmp_path: Path) -> None:
    grey = _rgb()[..., 0]
    alpha = np.full((H, W), 128, np.uint8)
    src = tmp_path / "grey_alpha.png"
    Image.fromarray(np.stack([grey, alpha], -1), "LA").save(src)
    got = _through_every_input(src, tmp_path)
    np.testing.assert_array_equal(got, np.repeat(grey[..., None], 3, axis=2))
    native = read_image_native(src)
    assert native.mode == "LA" and native.array.shape == (H, W, 2)
    np.testing.assert_allclose(native.array[..., 1], alpha / 255.0, atol=1e-7)


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_at_once_by_every_input(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    for read in (open_rgb, read_rgb_array, read_image_native, read_mask_array, read_header):
        with pytest.raises(ImageReadError, match=r"pipe\.png is not a file but a FIFO"):
            read(fifo)
    # classification: the scan lists regular files only, and counts the FIFO (also behind a link) as skipped
    root = tmp_path / "cls"
    (root / "a").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "a" / "ok.png")
    os.mkfifo(root / "a" / "pipe.png")
    (root / "b").mkdir()
    Image.new("RGB", (8, 8)).save(root / "b" / "ok.png")
    os.mkfifo(root / "b" / "real_pipe")
    (root / "b" / "linked.png").symlink_to("real_pipe")
    for verify in (True, False):
        dataset = FolderDataset(root, verify=verify)
        assert [Path(p).name for p, _ in dataset.samples] == ["ok.png", "ok.png"]
        assert sorted(Path(p).name for p in dataset.skipped) == ["linked.png", "pipe.png"]
    # segmentation: a FIFO among the images
    seg = tmp_path / "seg"
    (seg / "images").mkdir(parents=True)
    (seg / "masks").mkdir()
    os.mkfifo(seg / "images" / "pipe.png")
    Image.new("L", (8, 8)).save(seg / "masks" / "pipe.png")
    with pytest.raises(DataError, match=r"pipe\.png is not a file but a FIFO"):
        MaskFolder(seg, "train")
    # detection: a file_name that is a FIFO
    coco = tmp_path / "coco"
    (coco / "annotations").mkdir(parents=True)
    (coco / "train2017").mkdir()
    os.mkfifo(coco / "train2017" / "pipe.png")
    data = {
        "images": [{"id": 1, "file_name": "pipe.png", "height": 8, "width": 8}],
        "annotations": [],
        "categories": [{"id": 1, "name": "thing"}],
    }
    (coco / "annotations" / "instances_train.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"pipe\.png is not a file but a FIFO"):
        CocoDetection(coco, "train")[0]
    # restoration: a FIFO in the image folder, and the file itself
    res = tmp_path / "res"
    res.mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(res / name)
    os.mkfifo(res / "pipe.png")
    images = folder_images(res, mode="RGB")
    with pytest.raises(ImageReadError, match=r"pipe\.png is not a file but a FIFO"):
        for name in images.train + images.test:
            images.load(name)
    with pytest.raises(ImageReadError, match="FIFO"):
        load_image(fifo, "L")


def test_folders_missing_files_and_broken_images_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (tmp_path / "folder.png").mkdir()
    cases = [("broken.png", "cannot read image"), ("folder.png", "is not a file but a folder"), ("gone", "does not")]
    for name, message in cases:
        for read in (open_rgb, read_rgb_array, read_image_native, read_mask_array, read_header):
            with pytest.raises(ImageReadError, match=message) as info:
                read(tmp_path / name)
            assert name in str(info.value) and "\n" not in str(info.value)
            assert isinstance(info.value, DataError) and isinstance(info.value, ValueError)


def test_shard_images_go_through_the_same_reader(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    values = np.linspace(0, 65535, H * W).round().astype(np.uint16).reshape(H, W)
    Image.fromarray(values).save(tmp_path / "grey16.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(_rgb()).save(tmp_path / "rotated.jpg", quality=95, exif=exif)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard, "w") as tar:
        for key, (src, label) in enumerate([("grey16.png", 0), ("broken.png", 1), ("rotated.jpg", 2)]):
            tar.add(tmp_path / src, arcname=f"s{key}.{src.rsplit('.', 1)[1]}")
            data = str(label).encode()
            info = tarfile.TarInfo(f"s{key}.cls")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with caplog.at_level(logging.WARNING):
        got = list(ShardDataset([str(shard)], ["a", "b", "c"], 3, train=False))
    assert [label for _, label in got] == [0, 2]  # the broken image is skipped with a warning
    assert "skipping an unreadable shard sample" in caplog.text and "s1.png" in caplog.text
    np.testing.assert_array_equal(np.asarray(got[0][0]), read_rgb_array(tmp_path / "grey16.png"))
    np.testing.assert_array_equal(np.asarray(got[1][0]), read_rgb_array(tmp_path / "rotated.jpg"))
    assert np.asarray(got[1][0]).shape == (W, H, 3)
