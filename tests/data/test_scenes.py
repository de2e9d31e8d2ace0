"""The seeded scene generator and the embedded scene classification set."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from scipy import ndimage

from pdevision.data import DataError, build_datasets
from pdevision.data.embedded import SCENE_SETS, SceneClassification, SceneSetSpec, is_embedded, scene_arrays
from pdevision.data.scenes import FACE_CLASS, SceneConfig, load_sources, make_scene

DENSE = SceneConfig(size=64, n_digits=(2, 4), n_faces=(1, 3))


def test_scene_is_deterministic_in_seed_split_and_index() -> None:
    a, b = make_scene(0, "train", 7, DENSE), make_scene(0, "train", 7, DENSE)
    for field in ("image", "background", "masks", "boxes", "labels", "semantic"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.image, make_scene(1, "train", 7, DENSE).image)
    assert not np.array_equal(a.image, make_scene(0, "val", 7, DENSE).image)
    assert not np.array_equal(a.image, make_scene(0, "train", 8, DENSE).image)


@pytest.mark.parametrize("index", range(12))
def test_masks_hold_exactly_the_pasted_pixels(index: int) -> None:
    scene = make_scene(3, "train", index, DENSE)
    n = len(scene.labels)
    assert scene.image.shape == scene.background.shape == (64, 64, 3) and scene.image.dtype == np.uint8
    assert scene.masks.shape == (n, 64, 64) and scene.masks.dtype == bool
    # instance masks are disjoint, and outside them the image is the untouched background crop
    assert (scene.masks.sum(0) <= 1).all()
    union = scene.masks.any(0)
    np.testing.assert_array_equal(scene.image[~union], scene.background[~union])
    changed = (scene.image != scene.background).any(-1)
    assert not (changed & ~union).any()
    for mask, label in zip(scene.masks, scene.labels, strict=True):
        assert mask.sum() > 0
        if label != FACE_CLASS:  # a digit is painted in one colour: every pixel of its mask has it
            assert len(np.unique(scene.image[mask], axis=0)) == 1
    # semantic map: label + 1 exactly on each instance, 0 elsewhere
    expected = np.zeros((64, 64), dtype=np.int64)
    for mask, label in zip(scene.masks, scene.labels, strict=True):
        expected[mask] = label + 1
    np.testing.assert_array_equal(scene.semantic, expected)


def test_boxes_are_the_mask_extents() -> None:
    for index in range(10):
        scene = make_scene(0, "val", index, DENSE)
        for mask, box in zip(scene.masks, scene.boxes, strict=True):
            ((sy, sx),) = ndimage.find_objects(mask.astype(int))  # independent reference
            assert tuple(box) == (sx.start, sy.start, sx.stop, sy.stop)


def test_labels_and_sources_agree_and_splits_are_disjoint() -> None:
    src = load_sources()
    assert not set(src.digit_split["train"]) & set(src.digit_split["val"])
    assert not set(src.face_split["train"]) & set(src.face_split["val"])
    for split in ("train", "val"):
        for index in range(8):
            scene = make_scene(0, split, index, DENSE)
            for label, source in zip(scene.labels, scene.sources, strict=True):
                if label == FACE_CLASS:
                    assert source in src.face_split[split]
                else:
                    assert source in src.digit_split[split] and src.digit_labels[source] == label


def test_fixed_digit_labels_on_top_stay_visible() -> None:
    cfg = replace(DENSE, n_faces=(3, 3), digits_on_top=True)
    for index in range(10):
        scene = make_scene(0, "train", index, cfg, digit_labels=[index % 10])
        digits = [int(lbl) for lbl in scene.labels if lbl != FACE_CLASS]
        assert digits == [index % 10]


def test_scene_classification_balanced_and_cached() -> None:
    val = SceneClassification("scenes", "val")
    counts = Counter(val.targets)
    assert sorted(counts) == list(range(10)) and len(set(counts.values())) == 1
    assert len(val) == SCENE_SETS["scenes"].n_val
    img, label = val[0]
    assert img.size == (64, 64) and img.mode == "RGB" and label == val.targets[0]
    assert SceneClassification("scenes", "val").images is val.images  # in-memory cache, no files
    assert SceneClassification("scenes", "val", img_size=48)[0][0].size == (48, 48)


def test_build_datasets_dispatches_embedded_names(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(
        SCENE_SETS, "tiny", SceneSetSpec(n_train=20, n_val=10, config=SceneConfig(n_digits=(1, 1)), noise=5.0)
    )
    assert is_embedded("tiny") and is_embedded("digits") and not is_embedded(str(tmp_path))
    train, val = build_datasets("tiny", 32)
    assert len(train) == 20 and len(val) == 10 and train.classes == [str(c) for c in range(10)]
    assert train[0][0].size == (32, 32)
    digits_train, _ = build_datasets("digits", 32)
    assert len(digits_train) == 1437
    with pytest.raises(DataError, match="does not exist"):
        build_datasets(str(tmp_path / "scenes-missing"))
    scene_arrays.cache_clear()


def test_unknown_split_is_an_error() -> None:
    with pytest.raises(ValueError, match="split"):
        make_scene(0, "test", 0)
    with pytest.raises(DataError, match="unknown scene set"):
        SceneClassification("nope")
