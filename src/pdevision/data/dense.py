"""Data for segmentation and detection: the embedded scenes, mask folders, COCO json; paired transforms.

Samples are torchvision ``tv_tensors`` so one ``torchvision.transforms.v2`` pipeline moves the image,
its masks and boxes together:

* segmentation: ``(Image uint8 (3, H, W), Mask int64 (H, W))``, class indices, 255 ignored;
* detection: ``(Image uint8 (3, H, W), {"boxes": BoundingBoxes XYXY (N, 4), "labels": int64 (N,),
  "masks": Mask uint8 (N, H, W), "image_id": int})``, labels ``1..K`` (0 is the detector's background).

Sources:

* **Embedded scenes** (default, no download): :mod:`pdevision.data.scenes` (handwritten digit scans and
  lfw faces pasted onto crops of the bundled photos, exact instance masks), with one or two digits of
  0.5-0.75 times the side placed apart and on top, rotated +-15 degrees, and at most one face of 0.35-0.55
  times the side (:data:`DENSE_SCENE_KNOBS`). Segmentation classes:
  background, the ten digits, face (12); detection classes: the ten digits and face (11). Fixed split:
  2,000 train / 250 val scenes per seed (train and val use disjoint photo regions, digit scans and faces).
* **Mask folder** (ADE20K / VOC style): ``DIR/images/*.{jpg,png,...}`` and ``DIR/masks/<same stem>.png``
  holding class indices (255 ignored), optional ``DIR/classes.txt`` (one name per line). Train/val:
  ``DIR/train/`` and ``DIR/val/`` with that layout each, or one ``DIR`` split 80/20 by a fixed seed.
* **COCO json**: ``DIR/annotations/instances_{train,val}.json`` (pycocotools) with images in
  ``DIR/{train,val}2017/``, ``DIR/{train,val}/``, ``DIR/images/`` or ``DIR``. Crowd annotations are left
  out of training targets. A malformed annotation file is one :class:`DataError` naming the file and the
  fault; an image ``file_name`` must be relative, without ``..``, and a link may only lead inside ``DIR``
  or inside the image folder it sits in.

Every image (and mask) is read by :mod:`pdevision.data.imageio`, the reader of every task.

Recipes (:func:`segmentation_transforms`, :func:`detection_transforms`) follow the papers' downstream
settings (mmseg's ADE20K pipeline for UPerNet, mmdet's Mask R-CNN 1x pipeline): see their docstrings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NoReturn

import numpy as np
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

from pdevision._files import not_a_regular_file
from pdevision._optional import require
from pdevision._values import is_finite_number, is_int
from pdevision.data.embedded import refuse_classification_set
from pdevision.data.errors import DataError
from pdevision.data.imageio import IMAGE_EXTENSIONS, MASK_MODES, read_header, read_mask_array, read_rgb_array
from pdevision.data.scenes import CLASS_NAMES, SceneConfig, make_scene

log = logging.getLogger(__name__)

IGNORE_INDEX = 255
SCENE_SPLIT_SIZES = {"train": 2000, "val": 250}
# the generator's knobs for the dense default: one or two large digits (32-48 px at 64 px, strokes wide enough
# for a stride-4 decoder), placed apart (at most 10% of a digit on an earlier object) and never under a face,
# rotated +-15 degrees, at least 0.3 luminance from the photo under them; at most one face
DENSE_SCENE_KNOBS: dict[str, Any] = dict(
    digit_scale=(0.5, 0.75),
    face_scale=(0.35, 0.55),
    n_digits=(1, 2),
    n_faces=(0, 1),
    digits_on_top=True,
    rotation=15.0,
    min_contrast=0.3,
    max_overlap=0.1,
)
SEGMENT_SCENE_CLASSES = ["background", *CLASS_NAMES]
DETECT_SCENE_CLASSES = list(CLASS_NAMES)

__all__ = [
    "DETECT_SCENE_CLASSES",
    "IGNORE_INDEX",
    "SCENE_SPLIT_SIZES",
    "SEGMENT_SCENE_CLASSES",
    "CocoDetection",
    "MaskFolder",
    "SceneDetection",
    "SceneSegmentation",
    "build_dense_datasets",
    "detection_collate",
    "detection_transforms",
    "segmentation_transforms",
]


# -- transforms -----------------------------------------------------------------------------------


def segmentation_transforms(
    crop: int, train: bool, scale_range: tuple[float, float] = (0.5, 2.0), photometric: bool = True
) -> Callable:
    """Paired transforms for ``(Image, Mask)`` ending in a normalised float image and an int64 mask.

    Train (mmseg's ADE20K recipe used by the vHeat and HcNet UPerNet results, scaled to ``crop``):
    random resize keeping the aspect ratio to ``crop`` x a ratio uniform in ``scale_range`` (0.5-2.0),
    random ``crop`` x ``crop`` crop (padding with 0 / ignore where the image is smaller), horizontal
    flip (p 0.5), photometric distortion (brightness +-32/255, contrast and saturation 0.5-1.5, hue
    +-18 degrees; torchvision's ``ColorJitter``, applied to the image only). mmseg's "at most 75% of the
    crop in one class" retry is not done. Eval: the image as it is (the model pads to its stride).
    """
    tail = [v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)]
    tail.append(v2.Normalize(IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD))
    tail.append(v2.ToDtype({tv_tensors.Mask: torch.int64, "others": None}))
    if not train:
        return v2.Compose(tail)
    steps: list[Callable] = [
        v2.ScaleJitter((crop, crop), scale_range=scale_range, antialias=True),
        v2.RandomCrop(crop, pad_if_needed=True, fill={tv_tensors.Image: 0, tv_tensors.Mask: IGNORE_INDEX}),
        v2.RandomHorizontalFlip(),
    ]
    if photometric:
        steps.append(v2.ColorJitter(brightness=32 / 255, contrast=0.5, saturation=0.5, hue=18 / 360))
    return v2.Compose(steps + tail)


def detection_transforms(train: bool, scale_jitter: tuple[float, float] | None = None, size: int = 0) -> Callable:
    """Paired transforms for ``(Image, target)`` ending in a float image in ``[0, 1]`` (the detector
    normalises and resizes it itself). Train: horizontal flip (p 0.5), as mmdet's Mask R-CNN 1x
    recipe; multi-scale training is the detector's ``min_size`` tuple (one shorter side drawn per
    batch). ``scale_jitter=(lo, hi)`` adds large-scale jitter around ``size`` (resize by a ratio in
    ``lo..hi``, crop or pad back to ``size``; boxes cut by the crop are clipped, empty ones dropped)."""
    steps: list[Callable] = []
    if train:
        if scale_jitter is not None:
            steps += [
                v2.ScaleJitter((size, size), scale_range=scale_jitter, antialias=True),
                v2.RandomCrop(size, pad_if_needed=True),
                v2.ClampBoundingBoxes(),
                v2.SanitizeBoundingBoxes(min_size=1.0),
            ]
        steps.append(v2.RandomHorizontalFlip())
    steps.append(v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True))
    return v2.Compose(steps)


def detection_collate(batch: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Lists of images and targets (images differ in size; the detector batches them)."""
    images, targets = zip(*batch, strict=True)
    return list(images), list(targets)


def _detection_target(
    boxes: np.ndarray, labels: np.ndarray, masks: np.ndarray, size: tuple[int, int], image_id: int
) -> dict[str, Any]:
    return {
        "boxes": tv_tensors.BoundingBoxes(
            torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4), format="XYXY", canvas_size=size
        ),
        "labels": torch.as_tensor(labels, dtype=torch.int64),
        "masks": tv_tensors.Mask(torch.as_tensor(masks, dtype=torch.uint8).reshape(-1, *size)),
        "image_id": image_id,
    }


# -- embedded scenes ------------------------------------------------------------------------------


class _SceneBase(Dataset):
    """Scene ``i`` of ``split`` is built from its seed on first access (about 4 ms at 64 px) and kept in
    memory (``cache=True``, the default: about 44 kB a 64-px scene with its int64 map, 90 MB for the train
    split; each data loader worker keeps its own), so later epochs pay only for the transforms."""

    def __init__(
        self,
        split: str,
        size: int = 64,
        seed: int = 0,
        length: int | None = None,
        transform: Callable | None = None,
        cache: bool = True,
    ) -> None:
        if split not in SCENE_SPLIT_SIZES:
            raise DataError(f"scene split must be 'train' or 'val', got {split!r}")
        self.split = split
        self.cfg = SceneConfig(size=size, **DENSE_SCENE_KNOBS)
        self.seed = seed
        self.length = length or SCENE_SPLIT_SIZES[split]
        self.transform = transform
        self._cache: dict[int, Any] | None = {} if cache else None

    def __len__(self) -> int:
        return self.length

    def _scene(self, index: int) -> Any:
        if not 0 <= index < self.length:
            raise IndexError(index)
        return make_scene(self.seed, self.split, index, self.cfg)

    def _raw(self, index: int) -> Any:
        """The untransformed sample of scene ``index`` (cached)."""
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        sample = self._build(self._scene(index), index)
        if self._cache is not None:
            self._cache[index] = sample
        return sample

    def _build(self, scene: Any, index: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        sample = self._raw(index)
        return self.transform(*sample) if self.transform else sample


class SceneSegmentation(_SceneBase):
    """Embedded scenes with their semantic maps (0 background, digit ``d`` -> ``d + 1``, face -> 11)."""

    classes = SEGMENT_SCENE_CLASSES

    def _build(self, scene: Any, index: int) -> tuple[Any, Any]:
        return (
            tv_tensors.Image(torch.from_numpy(scene.image).permute(2, 0, 1)),
            tv_tensors.Mask(torch.from_numpy(scene.semantic)),
        )


class SceneDetection(_SceneBase):
    """Embedded scenes with instance boxes, masks and labels (digit ``d`` -> ``d + 1``, face -> 11)."""

    classes = DETECT_SCENE_CLASSES

    def _build(self, scene: Any, index: int) -> tuple[Any, Any]:
        size = (scene.image.shape[0], scene.image.shape[1])
        image = tv_tensors.Image(torch.from_numpy(scene.image).permute(2, 0, 1))
        return image, _detection_target(scene.boxes, scene.labels + 1, scene.masks, size, index)


# -- mask folders ---------------------------------------------------------------------------------


class MaskFolder(Dataset):
    """``root/images/<name>.<ext>`` with ``root/masks/<name>.png`` class-index masks (255 ignored).

    ``split``: ``"train"``/``"val"``; with ``root/train`` and ``root/val`` present those are used, else
    the pairs of ``root`` are split 80/20 by a fixed seed (0). Classes: ``classes.txt`` next to
    ``images/`` (or in ``root``), else ``0..max index`` found in the masks. Sizes are checked when the
    folder is opened (image headers only); index values when a mask is read.
    """

    def __init__(self, root: str | Path, split: str = "train", transform: Callable | None = None) -> None:
        refuse_classification_set(root, "a folder of images/ and masks/ (or the embedded scenes, without --data)")
        root = Path(root)
        if not root.is_dir():
            raise DataError(f"{root}: no such folder")
        if (root / "train").is_dir() and (root / "val").is_dir():
            base, pairs = root / split, self._pairs(root / split)
        else:
            base, pairs = root, self._pairs(root)
            order = np.random.default_rng(0).permutation(len(pairs))
            n_val = max(1, len(pairs) // 5) if len(pairs) > 1 else 0
            keep = sorted(order[:n_val]) if split == "val" else sorted(order[n_val:])
            pairs = [pairs[i] for i in keep]
        if not pairs:
            raise DataError(f"{base}: no image/mask pairs for split {split!r}")
        self.pairs = pairs
        self.transform = transform
        for names in (base / "classes.txt", root / "classes.txt"):
            what = not_a_regular_file(names)
            if what is not None and what != "a folder":
                raise DataError(f"{names} is {what}, not a regular file; classes.txt must be a text file")
        classes_file = next((p for p in (base / "classes.txt", root / "classes.txt") if p.is_file()), None)
        if classes_file is not None:
            self.classes = [line.strip() for line in classes_file.read_text().splitlines() if line.strip()]
            if not self.classes:
                raise DataError(f"{classes_file}: no class names")
        else:
            top = 0
            for _, mask in self._pairs(root / "train" if base != root else root):
                values = np.unique(read_mask_array(mask))
                values = values[values != IGNORE_INDEX]
                top = max(top, int(values.max()) if len(values) else 0)
            self.classes = [str(i) for i in range(top + 1)]

    @staticmethod
    def _pairs(folder: Path) -> list[tuple[Path, Path]]:
        images_dir, masks_dir = folder / "images", folder / "masks"
        for d in (images_dir, masks_dir):
            if not d.is_dir():
                raise DataError(f"{d}: missing (a mask folder needs images/ and masks/)")
        images = sorted(p for p in images_dir.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        if not images:
            raise DataError(f"{images_dir}: no images")
        pairs = []
        for img in images:
            mask = masks_dir / f"{img.stem}.png"
            if not mask.is_file():
                raise DataError(f"{img}: no mask {mask.name} in {masks_dir}")
            (a, _), (b, mode) = read_header(img), read_header(mask)
            if a != b:
                raise DataError(f"{mask}: mask is {b[0]}x{b[1]}, its image is {a[0]}x{a[1]}")
            if mode not in MASK_MODES:
                raise DataError(f"{mask}: a mask must be a one-channel PNG of class indices, got mode {mode}")
            pairs.append((img, mask))
        return pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        img_path, mask_path = self.pairs[index]
        image = read_rgb_array(img_path)
        mask = read_mask_array(mask_path)
        if mask.shape != image.shape[:2]:  # the files changed since the folder was opened
            raise DataError(
                f"{mask_path}: mask is {mask.shape[1]}x{mask.shape[0]}, its image {image.shape[1]}x{image.shape[0]}"
            )
        bad = (mask >= len(self.classes)) & (mask != IGNORE_INDEX)
        if bad.any():
            raise DataError(
                f"{mask_path}: class index {int(mask[bad].max())} but only {len(self.classes)} classes "
                f"(use 255 for ignored pixels)"
            )
        sample = (tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1)), tv_tensors.Mask(torch.from_numpy(mask)))
        return self.transform(*sample) if self.transform else sample


# -- COCO -----------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (an error message stays one readable line)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, as an error message says it."""
    if value is None:
        return "null"
    names = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


def _file_name_fault(name: Any) -> str | None:
    """Why ``name`` (an image's ``file_name``) is not a path relative to an image folder, or ``None``."""
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        return f"must be a non-empty relative path, got {_short(name)}"
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.drive or windows.root:
        return f"{name!r} is absolute (it must be relative to the image folder)"
    if ".." in posix.parts or ".." in windows.parts:
        return f"{name!r} climbs out of the image folder ('..' is not allowed)"
    return None


def _segmentation_fault(seg: Any) -> str | None:
    """Why ``seg`` is neither polygons nor an RLE pycocotools can rasterise, or ``None``."""
    if isinstance(seg, list):
        if not seg:
            return "is an empty polygon list"
        for poly in seg:
            if not (isinstance(poly, list) and len(poly) >= 6 and len(poly) % 2 == 0):
                return f"polygon {_short(poly)} is not a list of at least 3 x, y pairs"
            if not all(is_finite_number(v) for v in poly):
                return f"polygon {_short(poly)} holds a value that is not a finite number"
        return None
    if isinstance(seg, dict):
        size, counts = seg.get("size"), seg.get("counts")
        if not (isinstance(size, list) and len(size) == 2 and all(is_int(v) and v >= 0 for v in size)):
            return f"RLE size must be [height, width], got {_short(size)}"
        if not (isinstance(counts, str) or (isinstance(counts, list) and all(is_int(v) for v in counts))):
            return f"RLE counts must be a string or a list of integers, got {_json_type(counts)}"
        return None
    return f"must be a list of polygons or an RLE object, got {_json_type(seg)}"


def _check_coco(data: Any, ann_file: Path, masks: bool = True) -> None:
    """One-line errors naming the file for malformed annotation files and for the faults pycocotools would
    pass silently (unknown ids, boxes outside their image, absolute or climbing image paths)."""

    def fail(what: str) -> NoReturn:
        raise DataError(f"{ann_file}: {what}")

    if not isinstance(data, dict):
        fail(f"expected a JSON object with 'images', 'annotations' and 'categories', got a {_json_type(data)}")
    images = data.get("images")
    if not isinstance(images, list):
        fail(f"'images' must be a list of image records, got {_json_type(images)}")
    if not images:
        fail("the image list is empty")
    sizes: dict[int, tuple[int, int]] = {}
    for i, img in enumerate(images):
        if not isinstance(img, dict):
            fail(f"images[{i}] must be an object with id, file_name, height and width, got a {_json_type(img)}")
        missing = [k for k in ("id", "file_name", "height", "width") if k not in img]
        if missing:
            fail(f"images[{i}] has no {', '.join(missing)} (an image needs id, file_name, height and width)")
        iid, h, w = img["id"], img["height"], img["width"]
        if not is_int(iid):
            fail(f"images[{i}] id must be an integer, got {_short(iid)}")
        if iid in sizes:
            fail(f"image id {iid} appears twice")
        if not (is_int(h) and is_int(w) and h > 0 and w > 0):
            fail(f"image {iid} height and width must be positive integers, got {_short(h)} and {_short(w)}")
        fault = _file_name_fault(img["file_name"])
        if fault is not None:
            fail(f"image {iid} file_name {fault}")
        sizes[iid] = (h, w)
    categories = data.get("categories", [])
    if not isinstance(categories, list):
        fail(f"'categories' must be a list of category records, got {_json_type(categories)}")
    cats: set[int] = set()
    for i, cat in enumerate(categories):
        if not (isinstance(cat, dict) and is_int(cat.get("id")) and isinstance(cat.get("name"), str)):
            fail(f"categories[{i}] must be an object with an integer id and a name, got {_short(cat)}")
        if cat["id"] in cats:
            fail(f"category id {cat['id']} appears twice")
        cats.add(cat["id"])
    if not cats:
        fail("no categories")
    annotations = data.get("annotations", [])
    if not isinstance(annotations, list):
        fail(f"'annotations' must be a list of annotation records, got {_json_type(annotations)}")
    required = ("image_id", "category_id", "bbox", *(("segmentation",) if masks else ()))
    for k, ann in enumerate(annotations):
        if not isinstance(ann, dict):
            fail(f"annotations[{k}] must be an object, got a {_json_type(ann)}")
        aid = ann.get("id", f"#{k}")
        missing = [key for key in required if key not in ann]
        if missing:
            fail(f"annotation {aid} has no {', '.join(missing)} (an annotation needs {', '.join(required)})")
        cid, iid, bbox = ann["category_id"], ann["image_id"], ann["bbox"]
        if not is_int(cid) or cid not in cats:
            fail(f"annotation {aid} has unknown category id {_short(cid)} (categories: {sorted(cats)})")
        if not is_int(iid) or iid not in sizes:
            fail(f"annotation {aid} refers to unknown image id {_short(iid)}")
        numbers = isinstance(bbox, list) and all(is_finite_number(v) or isinstance(v, float) for v in bbox)
        if not (numbers and len(bbox) == 4):
            fail(f"annotation {aid} bbox must be [x, y, width, height], 4 numbers, got {_short(bbox)}")
        if not all(is_finite_number(v) for v in bbox):
            fail(f"annotation {aid} bbox {bbox} holds a value that is not a finite number")
        h, w = sizes[iid]
        x, y, bw, bh = bbox
        if bw < 0 or bh < 0:
            fail(f"annotation {aid} box [x={x}, y={y}, w={bw}, h={bh}] has a negative width or height")
        if x < -1 or y < -1 or x + bw > w + 1 or y + bh > h + 1:
            fail(f"annotation {aid} box [x={x}, y={y}, w={bw}, h={bh}] lies outside its image {iid} ({w}x{h})")
        seg = ann.get("segmentation")
        if seg is None and not masks:
            continue
        fault = _segmentation_fault(seg)
        if fault is not None:
            fail(f"annotation {aid} segmentation {fault}")
        if isinstance(seg, dict) and list(seg["size"]) != [h, w]:
            fail(f"annotation {aid} mask is {seg['size'][1]}x{seg['size'][0]}, its image {iid} is {w}x{h}")


class CocoDetection(Dataset):
    """COCO-format instances (boxes, instance masks) through pycocotools; see the module docstring.

    An image's ``file_name`` must be relative and stay inside the folder: absolute names and ``..`` are
    refused when the annotation file is read, and a symbolic link is followed only to a target inside the
    data root or inside the image folder it sits in (a linked image folder keeps working)."""

    def __init__(
        self, root: str | Path, split: str = "train", transform: Callable | None = None, masks: bool = True
    ) -> None:
        COCO = require("pycocotools.coco", "dense").COCO  # pycocotools is only needed for COCO folders

        refuse_classification_set(root, "a COCO folder (or the embedded scenes, without --data)")
        root = Path(root)
        self.root = root
        self.ann_file = root / "annotations" / f"instances_{split}.json"
        what = not_a_regular_file(self.ann_file)
        if what is not None:
            raise DataError(f"{self.ann_file} is {what}, not a regular file; COCO annotations must be a JSON file")
        if not self.ann_file.is_file():
            raise DataError(f"{self.ann_file}: not found (a COCO folder has annotations/instances_{split}.json)")
        try:
            data = json.loads(self.ann_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{self.ann_file}: not valid JSON ({exc})") from None
        except OSError as exc:
            raise DataError(f"{self.ann_file}: cannot read it ({exc.strerror or exc})") from None
        _check_coco(data, self.ann_file, masks)
        coco = COCO()
        coco.dataset = data
        coco.createIndex()
        self.coco = coco
        self.ids = sorted(coco.imgs)
        cat_ids = sorted(coco.cats)
        self.cat_to_label = {c: i + 1 for i, c in enumerate(cat_ids)}
        self.label_to_cat = {i + 1: c for i, c in enumerate(cat_ids)}
        self.classes = [coco.cats[c]["name"] for c in cat_ids]
        candidates = [root / f"{split}2017", root / split, root / "images" / split, root / "images", root]
        self.image_dirs = [d for d in candidates if d.is_dir()]
        self.transform = transform
        self.masks = masks

    def __len__(self) -> int:
        return len(self.ids)

    def image_path(self, image_id: int) -> Path:
        """The file of image ``image_id``: the first image folder holding its ``file_name``, links checked."""
        name = self.coco.imgs[image_id]["file_name"]
        for d in self.image_dirs:
            path = d / name
            if path.is_dir() or not (path.exists() or path.is_symlink()):
                continue
            real = path.resolve()
            if not any(real == top or top in real.parents for top in (self.root.resolve(), d.resolve())):
                raise DataError(
                    f"{self.ann_file}: image {image_id} file_name {name} leads to {real}, outside the data folder "
                    f"{self.root} (a link may only point inside it)"
                )
            return path
        raise DataError(f"{self.ann_file}: image file {name} not found under {', '.join(map(str, self.image_dirs))}")

    def _masks(self, anns: list[dict[str, Any]], h: int, w: int) -> np.ndarray:
        """The instance masks of ``anns`` rasterised by pycocotools, ``(N, h, w)`` uint8."""
        if not self.masks:
            return np.zeros((len(anns), h, w), np.uint8)
        out = []
        for ann in anns:
            try:
                out.append(self.coco.annToMask(ann))
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                raise DataError(
                    f"{self.ann_file}: annotation {ann.get('id')} segmentation cannot be rasterised "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())})"
                ) from None
        return np.stack(out) if out else np.zeros((0, h, w), np.uint8)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image_id = self.ids[index]
        info = self.coco.imgs[image_id]
        path = self.image_path(image_id)
        image = read_rgb_array(path)
        h, w = int(info["height"]), int(info["width"])
        if image.shape[:2] != (h, w):
            raise DataError(f"{path}: image is {image.shape[1]}x{image.shape[0]}, {self.ann_file.name} says {w}x{h}")
        anns = [a for a in self.coco.imgToAnns.get(image_id, []) if not a.get("iscrowd", 0)]
        anns = [a for a in anns if a["bbox"][2] >= 1 and a["bbox"][3] >= 1]
        boxes = np.array(
            [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]] for a in anns]
        )
        boxes = np.clip(boxes.reshape(-1, 4), 0, [w, h, w, h])
        labels = np.array([self.cat_to_label[a["category_id"]] for a in anns], dtype=np.int64)
        masks = self._masks(anns, h, w)
        img_t = tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1))
        target = _detection_target(boxes, labels, masks, (h, w), int(image_id))
        return self.transform(img_t, target) if self.transform else (img_t, target)


# -- building -------------------------------------------------------------------------------------


@dataclass
class DenseData:
    """Train and val sets, class names and where they came from."""

    train: Dataset
    val: Dataset
    classes: list[str]
    source: str


# the embedded scenes are 64 px: beyond 16 times that, a crop or a detector's side is only upsampling (and a
# backbone built at 16384 px asks for gigabytes before the first step)
SCENES_MAX_IMG_SIZE = 1024


def check_scene_img_size(img_size: int) -> None:
    """Refuse (:class:`DataError`, one line) an image size the embedded 64-px scenes cannot use sensibly."""
    if not 1 <= int(img_size) <= SCENES_MAX_IMG_SIZE:
        raise DataError(
            f"image size {img_size} is more than the embedded scenes (64 px) can use: at most {SCENES_MAX_IMG_SIZE} "
            "px; give a smaller --img-size or --data"
        )


def build_dense_datasets(
    task: str,
    data: str | Path | None,
    crop: int,
    seed: int = 0,
    scene_size: int = 64,
    train_length: int | None = None,
    val_length: int | None = None,
    scale_range: tuple[float, float] = (0.5, 2.0),
    scale_jitter: tuple[float, float] | None = None,
    photometric: bool = True,
) -> DenseData:
    """Datasets for ``task`` (``"segment"`` or ``"detect"``): the embedded scenes when ``data`` is
    ``None``, else a mask folder (segment) or a COCO folder (detect)."""
    if task == "segment":
        t_train = segmentation_transforms(crop, True, scale_range, photometric)
        t_val = segmentation_transforms(crop, False)
        if data is None:
            train = SceneSegmentation("train", scene_size, seed, train_length, t_train)
            val = SceneSegmentation("val", scene_size, seed, val_length, t_val)
            return DenseData(train, val, list(SEGMENT_SCENE_CLASSES), f"embedded scenes ({scene_size} px)")
        train, val = MaskFolder(data, "train", t_train), MaskFolder(data, "val", t_val)
        return DenseData(train, val, train.classes, str(data))
    if task != "detect":
        raise ValueError(f"task must be 'segment' or 'detect', got {task!r}")
    t_train, t_val = detection_transforms(True, scale_jitter, crop), detection_transforms(False)
    if data is None:
        train = SceneDetection("train", scene_size, seed, train_length, t_train)
        val = SceneDetection("val", scene_size, seed, val_length, t_val)
        return DenseData(train, val, list(DETECT_SCENE_CLASSES), f"embedded scenes ({scene_size} px)")
    train, val = CocoDetection(data, "train", t_train), CocoDetection(data, "val", t_val)
    if train.classes != val.classes:
        raise DataError(f"{val.ann_file}: categories differ from {train.ann_file}")
    return DenseData(train, val, train.classes, str(data))
