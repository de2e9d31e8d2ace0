"""Issue 37's closing sweep, the Pathfinder data: :class:`PathfinderConfig` and :func:`make_pathfinder` with bad
values (negative, zero, NaN, infinite, huge, of the wrong type; a bad split, seed or count), and ``--data
pathfinder|pathfinder-6|pathfinder-9|pathx`` through every task that takes ``--data``: a bad ``--img-size`` for each
set, and the tasks that take no classification set (segment, detect, denoise, dejpeg) refusing it by name. Each is
a one-line ``ValueError`` / exit 2 naming the knob and what it takes, before anything is drawn."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdevision.data.embedded import PATHFINDER_SETS, PathfinderSetSpec, pathfinder_arrays
from pdevision.data.pathfinder import PathfinderConfig, make_pathfinder
from tests.helpers import exit_code, one_line_exit_2

CFG = PathfinderConfig()
NAN, INF = float("nan"), float("inf")

# each was a TypeError, an OverflowError, numpy's "cannot convert float NaN to integer", a terabyte allocation
# (size 10**9: 32.6 TiB; tries 10**7: 57 GiB) or a drawing that had not ended after 15 s (thickness NaN or 10**6,
# max_turn 0, seed_distance 10**6, n_dashes 10**6, dash_length 10**9)
BAD_KNOBS = {
    "size-0": ({"size": 0}, "size must be an integer from 32 to 1024"),
    "size-negative": ({"size": -5}, "size must be an integer from 32 to 1024"),
    "size-nan": ({"size": NAN}, "size must be an integer"),
    "size-float": ({"size": 32.5}, "size must be an integer"),
    "size-string": ({"size": "32"}, "size must be an integer"),
    "size-bool": ({"size": True}, "size must be an integer"),
    "size-huge": ({"size": 10**9}, "size must be an integer from 32 to 1024"),
    "n_dashes-0": ({"n_dashes": 0}, "n_dashes must be an integer from 1 to 256"),
    "n_dashes-float": ({"n_dashes": 2.5}, "n_dashes must be an integer"),
    "n_dashes-nan": ({"n_dashes": NAN}, "n_dashes must be an integer"),
    "n_dashes-huge": ({"n_dashes": 10**6}, "n_dashes must be an integer from 1 to 256"),
    "n_distractors-negative": ({"n_distractors": -1}, "n_distractors must be an integer from 0 to 62"),
    "n_distractors-63": ({"n_distractors": 63}, "n_distractors must be an integer from 0 to 62"),
    "n_distractors-float": ({"n_distractors": 1.5}, "n_distractors must be an integer"),
    "n_distractors-string": ({"n_distractors": "8"}, "n_distractors must be an integer"),
    "distractor_dashes-0": ({"distractor_dashes": 0}, "distractor_dashes must be an integer from 1"),
    "distractor_dashes-huge": ({"distractor_dashes": 10**6}, "distractor_dashes must be an integer from 1 to 256"),
    "tries-0": ({"tries": 0}, "tries must be an integer from 1 to 256"),
    "tries-float": ({"tries": 1.5}, "tries must be an integer"),
    "tries-huge": ({"tries": 10**7}, "tries must be an integer from 1 to 256"),
    "dash_length-0": ({"dash_length": 0}, "dash_length must be a finite number above 0"),
    "dash_length-nan": ({"dash_length": NAN}, "dash_length must be a finite number"),
    "dash_length-inf": ({"dash_length": INF}, "dash_length must be a finite number"),
    "dash_length-huge": ({"dash_length": 1e9}, "at most 32 (pixels of a 32-px image)"),
    "dash_gap-negative": ({"dash_gap": -1.0}, "dash_gap must be a finite number above 0"),
    "dash_gap-nan": ({"dash_gap": NAN}, "dash_gap must be a finite number"),
    "dash_gap-inf": ({"dash_gap": INF}, "dash_gap must be a finite number"),
    "thickness-nan": ({"thickness": NAN}, "thickness must be a finite number"),
    "thickness-inf": ({"thickness": INF}, "thickness must be a finite number"),
    "thickness-above-separation": ({"thickness": 3.0}, "thickness 3.0 must be at most the separation 2.0"),
    "thickness-string": ({"thickness": "1"}, "thickness must be a finite number"),
    "dot_radius-nan": ({"dot_radius": NAN}, "dot_radius must be a finite number"),
    "dot_radius-huge": ({"dot_radius": 1e6}, "dot_radius must be a finite number above 0 and at most 32"),
    "max_turn-0": ({"max_turn": 0.0}, "max_turn must be a number of degrees in (0, 180]"),
    "max_turn-negative": ({"max_turn": -10.0}, "max_turn must be a number of degrees"),
    "max_turn-nan": ({"max_turn": NAN}, "max_turn must be a number of degrees"),
    "max_turn-inf": ({"max_turn": INF}, "max_turn must be a number of degrees"),
    "max_turn-270": ({"max_turn": 270.0}, "max_turn must be a number of degrees in (0, 180]"),
    "separation-nan": ({"separation": NAN}, "separation must be a finite number"),
    "separation-below-the-gap": ({"dash_gap": 3.0}, "separation 2.0 must be at least the dash gap"),
    "separation-huge": ({"separation": 1e6}, "separation must be a finite number above 0 and at most 32"),
    "seed_distance-nan": ({"seed_distance": NAN}, "seed_distance must be a finite number"),  # drew NaN dots
    "seed_distance-inf": ({"seed_distance": INF}, "seed_distance must be a finite number"),
    "seed_distance-huge": ({"seed_distance": 1e6}, "seed_distance must be a finite number above 0 and at most 32"),
    "seed_distance-too-short": ({"seed_distance": 4.0}, "seed_distance must exceed two dot radii"),
    "isotropic-a-string": ({"isotropic": "no"}, "isotropic must be True or False"),  # "no" is truthy
    "dot_distance-nan": ({"dot_distance": NAN}, "dot_distance must be a number from 0 to below 27.6"),
    "dot_distance-negative": ({"dot_distance": -1.0}, "dot_distance must be a number from 0 to below 27.6"),
    "dot_distance-wider-than-a-turned-drawing-fits": (
        {"dot_distance": 28.0},
        "dot_distance must be a number from 0 to below 27.6",
    ),
}


@pytest.mark.parametrize("case", list(BAD_KNOBS))
def test_a_bad_knob_is_one_line_naming_it_before_anything_is_drawn(case: str) -> None:
    change, message = BAD_KNOBS[case]
    with pytest.raises(ValueError) as caught:
        make_pathfinder(0, "train", 2, replace(CFG, **change))
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value


BAD_CALLS = {
    "n-negative": ((0, "train", -5), "pathfinder draws 0 to"),  # gave 251 images
    "n-float": ((0, "train", 2.5), "pathfinder draws 0 to"),  # a TypeError
    "n-string": ((0, "train", "2"), "pathfinder draws 0 to"),
    "n-huge": ((0, "train", 10**12), "pathfinder draws 0 to 2,097,152 images of 32 px"),  # drew for hours
    "split-unknown": ((0, "holdout", 2), "split must be one of ['train', 'val', 'test'], got 'holdout'"),
    "split-none": ((0, None, 2), "split must be one of"),
    "split-upper": ((0, "TRAIN", 2), "split must be one of"),
    "seed-negative": ((-1, "train", 2), "seed must be an integer >= 0"),
    "seed-float": ((1.5, "train", 2), "seed must be an integer >= 0"),  # a TypeError
    "seed-string": (("0", "train", 2), "seed must be an integer >= 0"),
    "workers-zero": ((0, "train", 2, CFG, 0), "pathfinder workers must be an integer >= 1, got 0"),
    "workers-float": ((0, "train", 2, CFG, 2.0), "pathfinder workers must be an integer >= 1, got 2.0"),
    "workers-string": ((0, "train", 2, CFG, "2"), "pathfinder workers must be an integer >= 1, got '2'"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_a_bad_count_split_or_seed_is_one_line(case: str) -> None:
    args, message = BAD_CALLS[case]
    with pytest.raises(ValueError) as caught:
        make_pathfinder(*args)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "n", "change"),
    [(0, 0, {}), (2**70, 2, {}), (np.int64(3), 2, {"size": np.int64(48)}), (0, 2, {"size": 1024, "n_dashes": 1})],
    ids=["no-images", "a-70-bit-seed", "numpy-integers", "the-largest-size"],
)
def test_knobs_at_their_limits_draw(seed: object, n: int, change: dict) -> None:
    cfg = replace(CFG, **change)
    drawn = make_pathfinder(seed, "train", n, cfg)  # type: ignore[arg-type]
    assert drawn.images.shape == (n, cfg.size, cfg.size) and drawn.labels.tolist() == [i % 2 for i in range(n)]
    assert set(np.unique(drawn.images)) <= {0, 255}


SETS = ["pathfinder", "pathfinder-6", "pathfinder-9", "pathx"]
FAST = ["--epochs", "1", "--max-train-batches", "1", "--batch-size", "2", "--no-progress"]


@pytest.mark.parametrize("data", SETS)
@pytest.mark.parametrize(
    ("size", "message"),
    [
        ("16", "image size 16 does not suit the embedded"),
        ("31", "image size 31 does not suit the embedded"),
        ("257", "image size 257 does not suit the embedded"),
        ("0", "--img-size: must be an integer in [1, 16384]"),
        ("1000000", "--img-size: must be an integer in [1, 16384]"),
        ("nan", "--img-size: must be an integer"),
    ],
)
def test_a_size_a_pathfinder_set_cannot_draw_is_one_line(
    data: str, size: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    err = one_line_exit_2(["train", "--data", data, "--img-size", size, "--output", out, *FAST], capsys)
    assert message in err, err
    assert not out.exists()


@pytest.mark.parametrize("data", [*SETS, "digits"])
@pytest.mark.parametrize("task", ["segment", "detect", "denoise", "dejpeg"])
def test_tasks_without_a_classification_set_name_it(
    task: str, data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They read ``--data pathfinder`` as a folder of that name: "pathfinder: no such folder"."""
    out = tmp_path / "run"
    err = one_line_exit_2(["train", "--task", task, "--data", data, "--output", out, *FAST], capsys)
    assert f"--data {data} is an embedded classification set" in err and "this task reads" in err, err
    assert not out.exists()


@pytest.mark.parametrize("data", ["pathfinder", "pathx"])
def test_eval_of_a_checkpoint_of_other_classes_on_pathfinder_is_refused_before_drawing(
    data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 5,000 training and 1,000 validation images were drawn (140 s) before the classes were compared."""
    import torch

    from pdevision.engine.modeling import create_model
    from pdevision.engine.save import save_checkpoint

    model = create_model("hcnet_micro", num_classes=10, img_size=32)
    meta = {"model": "hcnet_micro", "classes": [str(i) for i in range(10)], "img_size": 32, "data": "digits"}
    ckpt = save_checkpoint(tmp_path / "run", "best", model, {**meta, "model_args": {"img_size": 32}})
    pathfinder_arrays.cache_clear()
    err = one_line_exit_2(["eval", "--checkpoint", ckpt, "--data", data], capsys)
    assert "the data has ['apart', 'joined'] (2)" in err, err
    assert pathfinder_arrays.cache_info().currsize == 0  # nothing drawn
    del torch


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--data", "pathfinder-7"], "data folder pathfinder-7 does not exist"),
        (["train", "--data", "PATHFINDER"], "data folder PATHFINDER does not exist"),
        (["pretrain", "--data", "pathfinder-7"], "data folder pathfinder-7 does not exist"),
        (["train", "--data", "pathx", "--val-split", "0"], "--val-split"),
    ],
)
def test_names_near_the_sets_are_folders_that_do_not_exist(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = one_line_exit_2([*argv, "--output", tmp_path / "run", *FAST], capsys)
    assert message in err, err


@pytest.mark.slow
def test_a_tiny_pathfinder_set_trains_evaluates_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: a small set of the same generator through train, eval and export --int8."""
    tiny = PathfinderSetSpec(n_train=16, n_val=8, n_test=8, config=PathfinderConfig(n_dashes=6))
    monkeypatch.setitem(PATHFINDER_SETS, "pf-tiny", tiny)
    out = tmp_path / "run"
    assert exit_code(["train", "--data", "pf-tiny", "--model", "hcnet_micro", "--output", str(out), *FAST]) == 0
    assert exit_code(["eval", "--checkpoint", str(out), "--data", "pf-tiny"]) == 0
    assert "on 8 images" in capsys.readouterr().out
    onnx = tmp_path / "m.onnx"
    assert exit_code(["export", str(out), "--format", "onnx", "--int8", "--output", str(onnx)]) == 0
    assert onnx.is_file()
    pathfinder_arrays.cache_clear()
