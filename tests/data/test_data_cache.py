"""pdevision.data.cache: the opt-in disk cache of the generated sets (PDEVISION_DATA_CACHE)."""

from __future__ import annotations

import numpy as np
import pytest

import pdevision.data.embedded as embedded
from pdevision.cli import main
from pdevision.data.cache import ENV
from pdevision.data.embedded import (
    PATHFINDER_SETS,
    SCENE_SETS,
    PathfinderClassification,
    PathfinderSetSpec,
    SceneSetSpec,
    pathfinder_arrays,
    scene_arrays,
)
from pdevision.data.errors import DataError
from pdevision.data.pathfinder import PathfinderConfig
from pdevision.data.scenes import SceneConfig

TINY = PathfinderSetSpec(n_train=12, n_val=4, n_test=4, config=PathfinderConfig(n_dashes=6))


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(PATHFINDER_SETS, "pf-cache", TINY)
    pathfinder_arrays.cache_clear()
    yield "pf-cache"
    pathfinder_arrays.cache_clear()


def _refuse_drawing(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("drawn again")

    monkeypatch.setattr(embedded, "make_pathfinder", refuse)


def test_unset_writes_nothing(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    images, _ = pathfinder_arrays(tiny, "train", 32)
    assert images.shape == (12, 32, 32) and list(tmp_path.iterdir()) == []


def test_a_later_process_loads_the_same_arrays_instead_of_drawing(tiny, tmp_path, monkeypatch) -> None:
    drawn = pathfinder_arrays(tiny, "train", 32)  # without the cache
    pathfinder_arrays.cache_clear()
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    first = pathfinder_arrays(tiny, "train", 32)
    (written,) = (tmp_path / "cache").iterdir()
    assert written.name.startswith("pf-cache-train-32px-") and written.suffix == ".npz"
    pathfinder_arrays.cache_clear()  # as a new process
    _refuse_drawing(monkeypatch)
    loaded = pathfinder_arrays(tiny, "train", 32)
    for a, b, c in zip(drawn, first, loaded, strict=True):
        assert a.dtype == c.dtype and np.array_equal(a, b) and np.array_equal(a, c)
    assert PathfinderClassification(tiny, "train", 32).targets == drawn[1].tolist()


def test_every_split_size_and_setting_has_its_own_file(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    pathfinder_arrays(tiny, "train", 32)
    pathfinder_arrays(tiny, "val", 32)
    pathfinder_arrays(tiny, "val", 64)
    monkeypatch.setitem(PATHFINDER_SETS, tiny, PathfinderSetSpec(12, 4, 4, PathfinderConfig(n_dashes=7)))
    pathfinder_arrays.cache_clear()
    other = pathfinder_arrays(tiny, "val", 32)
    assert len(list(tmp_path.glob("*.npz"))) == 4
    monkeypatch.setitem(PATHFINDER_SETS, tiny, TINY)
    pathfinder_arrays.cache_clear()
    assert not np.array_equal(other[0], pathfinder_arrays(tiny, "val", 32)[0])  # not the 7-dash file


def test_a_damaged_or_foreign_file_is_drawn_again_and_replaced(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    good = pathfinder_arrays(tiny, "val", 32)
    (path,) = tmp_path.glob("*.npz")
    for damage in (path.read_bytes()[:100], b"not a zip", None):
        if damage is None:  # readable, but not the shape asked for
            np.savez(path, images=np.zeros((3, 32, 32), np.uint8), labels=np.zeros(3, np.int64))
        else:
            path.write_bytes(damage)
        pathfinder_arrays.cache_clear()
        again = pathfinder_arrays(tiny, "val", 32)
        assert np.array_equal(again[0], good[0]) and np.array_equal(again[1], good[1])
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # replaced, no temporary left


def test_a_folder_that_cannot_be_written_is_refused_before_drawing(tiny, tmp_path, monkeypatch) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    monkeypatch.setenv(ENV, str(a_file))
    _refuse_drawing(monkeypatch)
    with pytest.raises(DataError, match=f"^{ENV}=.* is not a folder this process can write .*unset it") as err:
        pathfinder_arrays(tiny, "val", 32)
    assert "\n" not in str(err.value) and a_file.read_text() == "mine"


def test_the_cli_refuses_it_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    monkeypatch.setenv(ENV, str(a_file))
    assert main(["train", "--data", "pathfinder", "--epochs", "1", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{ENV}={a_file} is not a folder" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_scene_sets_go_through_it_too(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(SCENE_SETS, "scenes-cache", SceneSetSpec(n_train=4, n_val=2, config=SceneConfig(), noise=6.0))
    scene_arrays.cache_clear()
    drawn = scene_arrays("scenes-cache", "val", 32)
    monkeypatch.setenv(ENV, str(tmp_path))
    zoomed = scene_arrays("scenes-cache", "val", 32, zoom_out=2.0)  # another file: other objects' sizes
    scene_arrays.cache_clear()
    scene_arrays("scenes-cache", "val", 32)
    assert len(list(tmp_path.glob("scenes-cache-val-32px-*.npz"))) == 2
    scene_arrays.cache_clear()
    monkeypatch.setattr(embedded, "make_scene", lambda *a, **k: (_ for _ in ()).throw(AssertionError("drawn")))
    loaded = scene_arrays("scenes-cache", "val", 32)
    assert np.array_equal(loaded[0], drawn[0]) and np.array_equal(loaded[1], drawn[1])
    assert np.array_equal(scene_arrays("scenes-cache", "val", 32, zoom_out=2.0)[0], zoomed[0])
    assert not np.array_equal(zoomed[0], drawn[0])
    scene_arrays.cache_clear()
