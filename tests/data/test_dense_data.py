"""Dense data: embedded scenes, tiny mask folders and COCO folders built here, paired transforms,
one-line errors naming the file for bad annotations."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pycocotools import mask as mask_utils

from pdevision.data.datasets import DataError
from pdevision.data.dense import (
    DENSE_SCENE_KNOBS,
    IGNORE_INDEX,
    CocoDetection,
    MaskFolder,
    SceneDetection,
    SceneSegmentation,
    build_dense_datasets,
    detection_collate,
    detection_transforms,
    segmentation_transforms,
)
from pdevision.data.scenes import SceneConfig, make_scene


def _write_mask_folder(root: Path, n: int = 5, size: tuple[int, int] = (30, 40), classes: bool = True) -> None:
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(root / "images" / f"im{i}.jpg")
        mask = np.zeros(size, np.uint8)
        mask[5:15, 10:30] = 1 + i % 2
        mask[0, :] = IGNORE_INDEX
        Image.fromarray(mask).save(root / "masks" / f"im{i}.png")
    if classes:
        (root / "classes.txt").write_text("background\ncat\ndog\n")


def test_mask_folder_split_classes_and_values(tmp_path: Path) -> None:
    _write_mask_folder(tmp_path)
    train, val = MaskFolder(tmp_path, "train"), MaskFolder(tmp_path, "val")
    assert train.classes == ["background", "cat", "dog"]
    assert len(train) == 4 and len(val) == 1
    assert not {p for p, _ in train.pairs} & {p for p, _ in val.pairs}
    image, mask = train[0]
    assert image.shape == (3, 30, 40) and image.dtype == torch.uint8
    assert set(mask.unique().tolist()) <= {0, 1, 2, IGNORE_INDEX} and (mask[0] == IGNORE_INDEX).all()


def test_mask_folder_classes_from_masks_and_train_val_subfolders(tmp_path: Path) -> None:
    _write_mask_folder(tmp_path / "train", n=3, classes=False)
    _write_mask_folder(tmp_path / "val", n=2, classes=False)
    train, val = MaskFolder(tmp_path, "train"), MaskFolder(tmp_path, "val")
    assert (len(train), len(val)) == (3, 2)
    assert train.classes == ["0", "1", "2"]  # 255 is not a class


def test_mask_folder_errors_name_the_file(tmp_path: Path) -> None:
    _write_mask_folder(tmp_path)
    Image.fromarray(np.zeros((31, 40), np.uint8)).save(tmp_path / "masks" / "im2.png")
    with pytest.raises(DataError, match=r"im2\.png: mask is 40x31, its image is 40x30"):
        MaskFolder(tmp_path, "train")
    Image.fromarray(np.full((30, 40), 7, np.uint8)).save(tmp_path / "masks" / "im2.png")
    ds = next(
        d
        for d in (MaskFolder(tmp_path, "train"), MaskFolder(tmp_path, "val"))
        if any(m.name == "im2.png" for _, m in d.pairs)
    )
    idx = [p.name for _, p in ds.pairs].index("im2.png")
    with pytest.raises(DataError, match=r"im2\.png: class index 7 but only 3 classes"):
        ds[idx]
    (tmp_path / "masks" / "im2.png").unlink()
    with pytest.raises(DataError, match=r"im2\.jpg: no mask im2\.png"):
        MaskFolder(tmp_path, "train")
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    (empty / "masks").mkdir()
    with pytest.raises(DataError, match="images: no images"):
        MaskFolder(empty, "train")


def _coco(root: Path, split: str = "train", **overrides) -> Path:
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / f"{split}2017").mkdir(exist_ok=True)
    images, anns = [], []
    rng = np.random.default_rng(1)
    for i, (h, w) in enumerate([(40, 50), (33, 47)]):
        name = f"{i:03d}.png"
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / f"{split}2017" / name)
        images.append(dict(id=i + 1, file_name=name, height=h, width=w))
        mask = np.zeros((h, w), np.uint8, order="F")
        mask[5:20, 8:30] = 1
        rle = mask_utils.encode(mask)
        rle["counts"] = rle["counts"].decode()
        anns.append(
            dict(id=10 + i, image_id=i + 1, category_id=7, bbox=[8, 5, 22, 15], area=330, iscrowd=0, segmentation=rle)
        )
        poly = [[30.0, 20.0, 45.0, 20.0, 45.0, 30.0, 30.0, 30.0]]
        anns.append(
            dict(
                id=20 + i, image_id=i + 1, category_id=3, bbox=[30, 20, 15, 10], area=150, iscrowd=0, segmentation=poly
            )
        )
    data = dict(images=images, annotations=anns, categories=[dict(id=3, name="dog"), dict(id=7, name="cat")])
    for key, fn in overrides.items():
        fn(data) if callable(fn) else data.__setitem__(key, fn)
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(json.dumps(data))
    return path


def test_coco_boxes_masks_labels(tmp_path: Path) -> None:
    _coco(tmp_path)
    ds = CocoDetection(tmp_path, "train")
    assert ds.classes == ["dog", "cat"] and len(ds) == 2
    image, target = ds[0]
    assert image.shape == (3, 40, 50)
    assert target["labels"].tolist() == [2, 1]  # category 7 -> label 2, 3 -> 1 (0 is background)
    assert target["boxes"][0].tolist() == [8.0, 5.0, 30.0, 20.0]
    assert target["masks"].shape == (2, 40, 50)
    assert int(target["masks"][0].sum()) == 15 * 22 and target["masks"][0, 5:20, 8:30].all()
    assert target["masks"][1, 22:28, 32:43].all()  # the polygon is rasterised


@pytest.mark.parametrize(
    "fault,message",
    [
        (lambda d: d["annotations"][0]["bbox"].__setitem__(0, 45), "annotation 10 box .* lies outside its image 1"),
        (lambda d: d["annotations"][1].__setitem__("category_id", 99), "annotation 20 has unknown category id 99"),
        (lambda d: d.__setitem__("images", []), "the image list is empty"),
        (lambda d: d["annotations"][0]["segmentation"].__setitem__("size", [41, 50]), "annotation 10 mask is 50x41"),
    ],
)
def test_coco_bad_annotations_one_line_errors(tmp_path: Path, fault, message: str) -> None:
    _coco(tmp_path, fault=fault)
    with pytest.raises(DataError, match=message) as info:
        CocoDetection(tmp_path, "train")
    assert "instances_train.json" in str(info.value) and "\n" not in str(info.value)


def test_coco_missing_file_and_image(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"instances_val\.json: not found"):
        CocoDetection(tmp_path, "val")
    _coco(tmp_path)
    (tmp_path / "train2017" / "001.png").unlink()
    ds = CocoDetection(tmp_path, "train")
    with pytest.raises(DataError, match=r"image file 001\.png not found"):
        ds[1]


def test_scene_sets_match_the_generator() -> None:
    seg, det = SceneSegmentation("val", 64, seed=3), SceneDetection("val", 64, seed=3)
    scene = make_scene(3, "val", 5, SceneConfig(size=64, **DENSE_SCENE_KNOBS))
    image, mask = seg[5]
    assert torch.equal(image, torch.from_numpy(scene.image).permute(2, 0, 1))
    assert torch.equal(mask, torch.from_numpy(scene.semantic))
    _, target = det[5]
    assert target["labels"].tolist() == (scene.labels + 1).tolist()
    assert torch.equal(target["masks"].bool(), torch.from_numpy(scene.masks))
    assert len(seg.classes) == 12 and len(det.classes) == 11


def test_segmentation_train_transform_pairs_image_and_mask() -> None:
    """Geometry moves image and mask together: the pasted pixels still cover the same labels."""
    torch.manual_seed(0)
    tf = segmentation_transforms(48, train=True, photometric=False)
    ds = SceneSegmentation("train", 64, length=8)
    raw_img, raw_mask = ds[1]
    for _ in range(5):
        img, mask = tf(raw_img, raw_mask)
        assert img.shape == (3, 48, 48) and img.dtype == torch.float32 and mask.shape == (48, 48)
        assert mask.dtype == torch.int64 and set(mask.unique().tolist()) <= set(raw_mask.unique().tolist()) | {255}
    val_img, val_mask = segmentation_transforms(48, train=False)(raw_img, raw_mask)
    assert val_img.shape == (3, 64, 64) and torch.equal(val_mask, raw_mask)


def test_detection_transform_flip_and_collate() -> None:
    torch.manual_seed(0)
    ds = SceneDetection("train", 64, length=4)
    image, target = ds[0]
    flipped = detection_transforms(True)
    seen = set()
    for _ in range(8):
        img, tgt = flipped(image, target)
        box = tgt["boxes"][0]
        mask = tgt["masks"][0]
        ys, xs = torch.nonzero(mask, as_tuple=True)
        assert box.tolist() == [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]
        seen.add(tuple(box.tolist()))
        assert img.dtype == torch.float32 and img.max() <= 1
    assert len(seen) == 2  # both flipped and not
    jitter = detection_transforms(True, scale_jitter=(0.5, 1.5), size=64)
    for i in range(4):
        img, tgt = jitter(*ds[i])
        assert img.shape == (3, 64, 64) and len(tgt["boxes"]) == len(tgt["labels"]) == len(tgt["masks"])
    images, targets = detection_collate([ds[0], ds[1]])
    assert len(images) == len(targets) == 2


def test_build_dense_datasets_sources(tmp_path: Path) -> None:
    seg = build_dense_datasets("segment", None, 48, train_length=4, val_length=2)
    assert seg.classes[0] == "background" and len(seg.train) == 4 and seg.train[0][0].shape == (3, 48, 48)
    _coco(tmp_path, "train")
    _coco(tmp_path, "val")
    det = build_dense_datasets("detect", tmp_path, 64)
    assert det.classes == ["dog", "cat"] and len(det.val) == 2
    with pytest.raises(ValueError, match="task must be"):
        build_dense_datasets("classify", None, 48)


def test_scene_cache_keeps_the_raw_sample_under_random_transforms() -> None:
    """Cached scenes are built once and stay the generator's output however often they are transformed."""
    raw = SceneSegmentation("train", 64, length=4)
    assert raw._cache is not None and raw[2] is raw[2]  # the cached sample itself
    ds = SceneSegmentation("train", 64, length=4, transform=segmentation_transforms(64, True, (0.75, 1.5)))
    torch.manual_seed(0)
    outs = [ds[2][1] for _ in range(4)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])  # the augmentation still varies
    scene = make_scene(0, "train", 2, SceneConfig(size=64, **DENSE_SCENE_KNOBS))
    image, mask = ds._raw(2)
    assert torch.equal(image, torch.from_numpy(scene.image).permute(2, 0, 1))
    assert torch.equal(mask, torch.from_numpy(scene.semantic))
    det = SceneDetection("train", 64, length=4, transform=detection_transforms(False), cache=False)
    assert det._cache is None and torch.equal(det[1][1]["boxes"], torch.from_numpy(det._scene(1).boxes).float())


def _drop(key: str) -> Callable[[dict], None]:
    return lambda d: d["annotations"][0].pop(key)


@pytest.mark.parametrize(
    "fault,message",
    [
        (_drop("category_id"), "annotation 10 has no category_id"),
        (_drop("bbox"), "annotation 10 has no bbox"),
        (_drop("image_id"), "annotation 10 has no image_id"),
        (_drop("segmentation"), "annotation 10 has no segmentation"),
        (lambda d: d.__setitem__("images", {"id": 1}), "'images' must be a list of image records, got object"),
        (lambda d: d["images"].__setitem__(0, "000.png"), r"images\[0\] must be an object"),
        (lambda d: d["images"][0].pop("height"), r"images\[0\] has no height"),
        (lambda d: d["images"][1].__setitem__("id", 1), "image id 1 appears twice"),
        (lambda d: d["images"][0].__setitem__("width", "50"), "image 1 height and width must be positive integers"),
        (lambda d: d.__setitem__("categories", {"3": "dog"}), "'categories' must be a list"),
        (lambda d: d["categories"].append({"id": 3, "name": "cat"}), "category id 3 appears twice"),
        (lambda d: d.__setitem__("annotations", None), "'annotations' must be a list of annotation records, got null"),
        (lambda d: d["annotations"].__setitem__(0, [8, 5, 22, 15]), r"annotations\[0\] must be an object, got a list"),
        (lambda d: d["annotations"][0].__setitem__("category_id", 5), "annotation 10 has unknown category id 5"),
        (lambda d: d["annotations"][0].__setitem__("category_id", [7]), r"unknown category id \[7\]"),
        (lambda d: d["annotations"][0].__setitem__("image_id", 9), "annotation 10 refers to unknown image id 9"),
        (lambda d: d["annotations"][0]["bbox"].__setitem__(1, float("nan")), "bbox .* not a finite number"),
        (lambda d: d["annotations"][0]["bbox"].__setitem__(2, -3), "annotation 10 box .* negative width or height"),
        (lambda d: d["annotations"][0].__setitem__("bbox", [8, 5, 22]), r"bbox must be \[x, y, width, height\]"),
        (lambda d: d["annotations"][0].__setitem__("bbox", "8 5 22 15"), r"bbox must be \[x, y, width, height\]"),
        (lambda d: d["annotations"][1].__setitem__("segmentation", [[1, 2, 3]]), "annotation 20 segmentation polygon"),
        (lambda d: d["annotations"][1].__setitem__("segmentation", 7), "segmentation must be a list of polygons"),
        (lambda d: d["annotations"][0]["segmentation"].pop("size"), r"RLE size must be \[height, width\]"),
        (lambda d: d["images"][0].__setitem__("file_name", "/etc/passwd"), "'/etc/passwd' is absolute"),
        (lambda d: d["images"][0].__setitem__("file_name", "../outside.png"), r"'\.\./outside\.png' climbs out"),
        (lambda d: d["images"][0].__setitem__("file_name", "a/../../x.png"), "climbs out"),
        (lambda d: d["images"][0].__setitem__("file_name", ""), "file_name must be a non-empty relative path"),
    ],
)
def test_malformed_coco_files_are_one_data_error_naming_the_file(tmp_path: Path, fault, message: str) -> None:
    _coco(tmp_path, fault=fault)
    with pytest.raises(DataError, match=message) as info:
        CocoDetection(tmp_path, "train")
    assert str(info.value).startswith(str(tmp_path / "annotations" / "instances_train.json") + ": ")
    assert "\n" not in str(info.value)


def test_coco_top_level_list_and_boxes_only_without_masks(tmp_path: Path) -> None:
    path = _coco(tmp_path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps([data]))
    with pytest.raises(DataError, match=r"instances_train\.json: expected a JSON object .* got a list"):
        CocoDetection(tmp_path, "train")
    for ann in data["annotations"]:
        del ann["segmentation"]
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="annotation 10 has no segmentation"):
        CocoDetection(tmp_path, "train")
    _, target = CocoDetection(tmp_path, "train", masks=False)[0]  # boxes only: no segmentation needed
    assert target["boxes"].shape == (2, 4) and target["masks"].shape == (2, 40, 50)


def test_coco_links_may_not_leave_the_data_folder(tmp_path: Path) -> None:
    root, outside = tmp_path / "coco", tmp_path / "elsewhere"
    _coco(root)
    outside.mkdir()
    shutil.move(root / "train2017" / "000.png", outside / "000.png")
    (root / "train2017" / "000.png").symlink_to(outside / "000.png")
    ds = CocoDetection(root, "train")
    with pytest.raises(DataError, match=r"image 1 file_name 000\.png leads to .*elsewhere.*outside the data folder"):
        ds[0]
    # a link inside the data folder is followed
    (root / "train2017" / "000.png").unlink()
    (root / "pool").mkdir()
    shutil.move(outside / "000.png", root / "pool" / "000.png")
    (root / "train2017" / "000.png").symlink_to(root / "pool" / "000.png")
    assert ds[0][0].shape == (3, 40, 50)
    # a linked image folder keeps working: its files lie in the folder the link names
    shutil.move(root / "train2017", outside / "train2017")
    (root / "train2017").symlink_to(outside / "train2017")
    (outside / "train2017" / "000.png").unlink()
    shutil.copy(root / "pool" / "000.png", outside / "train2017" / "000.png")
    assert CocoDetection(root, "train")[0][0].shape == (3, 40, 50)


def test_corrupt_images_in_mask_and_coco_folders_are_data_errors(tmp_path: Path) -> None:
    _write_mask_folder(tmp_path / "seg", n=2)
    (tmp_path / "seg" / "images" / "im1.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    with pytest.raises(DataError, match=r"cannot read image .*im1\.jpg"):
        MaskFolder(tmp_path / "seg", "train")
    # a header that decodes, pixels that do not: refused when the item is read
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(png, format="PNG")
    (tmp_path / "seg" / "images" / "im1.jpg").unlink()
    (tmp_path / "seg" / "images" / "im1.png").write_bytes(png.getvalue()[: len(png.getvalue()) // 2])
    ds = MaskFolder(tmp_path / "seg", "train")
    with pytest.raises(DataError, match=r"cannot read image .*im1\.png"):
        ds[[p.name for p, _ in ds.pairs].index("im1.png")]
    (tmp_path / "seg" / "masks" / "im0.png").write_bytes(b"garbage")
    with pytest.raises(DataError, match=r"cannot read image .*masks/im0\.png"):
        MaskFolder(tmp_path / "seg", "train")
    _coco(tmp_path / "coco")
    (tmp_path / "coco" / "train2017" / "001.png").write_bytes(png.getvalue()[:100])
    with pytest.raises(DataError, match=r"cannot read image .*001\.png"):
        CocoDetection(tmp_path / "coco", "train")[1]
