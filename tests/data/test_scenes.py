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
    for spec in SCENE_SETS.values():
        assert spec.n_train % 10 == 0 and spec.n_val % 10 == 0


def test_scene_set_at_another_size_is_the_same_scenes(monkeypatch) -> None:
    spec = SceneSetSpec(n_train=10, n_val=10, config=SceneConfig(n_digits=(1, 1), digits_on_top=True), noise=0.0)
    monkeypatch.setitem(SCENE_SETS, "tiny", spec)
    small, large = SceneClassification("tiny", "val", 48), SceneClassification("tiny", "val", 96)
    assert small[0][0].size == (48, 48) and large[0][0].size == (96, 96)
    # the same random draws at both sizes: a scene rendered larger looks the same once downsampled
    down = np.asarray(large[3][0].resize((48, 48), resample=2), dtype=float)
    assert np.abs(down - np.asarray(small[3][0], dtype=float)).mean() < 10  # another scene: 30-115
    scene_arrays.cache_clear()


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


@pytest.mark.slow
def test_micro_model_learns_scenes_above_chance(tmp_path) -> None:
    from pdevision.engine import RunConfig
    from pdevision.tasks.classify import ClassifyConfig, train

    summary = train(
        ClassifyConfig(
            model="vheat_micro", data="scenes", run=RunConfig(epochs=10, output=str(tmp_path / "run"), progress=False)
        )
    )
    assert summary["val_images"] == 1000
    assert summary["best_val_top1"] > 20.0  # chance: 10%


# sha256 of the classification set's scenes (train and val, indices 0-5, 32 and 64 px: image, masks, labels,
# semantic map), recorded from the generator before ``max_overlap`` was added: an option added to
# SceneConfig must leave every existing configuration's scenes exactly as they were
CLASSIFICATION_SCENES_SHA256 = "d59c801b5cc7b47aef4b88eb1c0746a1f4c93b6e8922be6008caaf95216fd561"


def test_classification_scenes_unchanged_by_added_options() -> None:
    import hashlib

    spec = SCENE_SETS["scenes"]
    assert spec.config.max_overlap is None
    digest = hashlib.sha256()
    for split in ("train", "val"):
        for i in range(6):
            for size in (32, 64):
                scene = make_scene(spec.seed, split, i, replace(spec.config, size=size), digit_labels=[i % 10])
                for array in (scene.image, scene.masks, scene.labels, scene.semantic):
                    digest.update(np.ascontiguousarray(array).tobytes())
    assert digest.hexdigest() == CLASSIFICATION_SCENES_SHA256


def _occluded(scene, side: int) -> int:
    """Pixels of the scene's digits hidden by later pastes (rotation 0, every digit ``side`` px: a digit's
    pasted mask is its scan resized and thresholded, as the generator builds it)."""
    from PIL import Image

    src = load_sources()
    hidden = 0
    for mask, label, source in zip(scene.masks, scene.labels, scene.sources, strict=True):
        assert label < 10
        ink = Image.fromarray(src.digits[source].astype(np.float32), mode="F").resize((side, side), Image.BICUBIC)
        hidden += int((np.asarray(ink) >= 0.5).sum()) - int(mask.sum())
    return hidden


def test_max_overlap_places_digits_apart() -> None:
    """max_overlap=0: no digit covers another (every digit keeps all its pasted pixels); unset, some do."""
    base = SceneConfig(size=64, n_digits=(3, 3), n_faces=(0, 0), digit_scale=(0.3, 0.3), rotation=0.0, min_visible=0.0)
    side = round(0.3 * 64)
    apart = [_occluded(make_scene(0, "train", i, replace(base, max_overlap=0.0)), side) for i in range(12)]
    anywhere = [_occluded(make_scene(0, "train", i, base), side) for i in range(12)]
    assert apart == [0] * 12
    assert sum(h > 0 for h in anywhere) >= 3


def test_zoomed_out_scenes_keep_the_trained_object_size() -> None:
    from pdevision.data.embedded import zoomed_out

    base = SceneConfig(**{**SCENE_SETS["scenes"].config.__dict__, "size": 32})
    big = zoomed_out(SceneConfig(**{**base.__dict__, "size": 64}), 2.0)
    assert big.digit_scale == (base.digit_scale[0] / 2, base.digit_scale[1] / 2)
    assert big.face_scale == (base.face_scale[0] / 2, base.face_scale[1] / 2)
    assert big.crop_range == (min(1.0, base.crop_range[0] * 2), min(1.0, base.crop_range[1] * 2))
    assert zoomed_out(base, 1.0) is base
    assert SCENE_SETS["scenes"].config.n_digits == (1, 1)  # one digit per scene: the label's one box
    sides_small, sides_big, sides_grown = [], [], []
    grown = SceneConfig(**{**base.__dict__, "size": 64})
    for i in range(40):
        for cfg, out in ((base, sides_small), (big, sides_big), (grown, sides_grown)):
            scene = make_scene(0, "val", i, cfg, digit_labels=[i % 10])
            box = scene.boxes[scene.labels == i % 10][0]
            out.append(max(box[2] - box[0], box[3] - box[1]))
    # zoomed out: the digits' pixel size of the 32 px scenes; rendered larger: twice that
    assert abs(np.mean(sides_big) / np.mean(sides_small) - 1.0) < 0.1
    assert abs(np.mean(sides_grown) / np.mean(sides_small) - 2.0) < 0.2
    for bad in (0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="zoom_out must be a number >= 1"):
            zoomed_out(base, bad)
