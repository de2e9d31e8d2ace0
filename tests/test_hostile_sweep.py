"""Cases of the closing hostile sweep (issue 24) that got through: each a checkpoint crafted by hand, run through
``pdevision predict`` and ``eval`` as a user would, expected to give a one-line error naming the checkpoint and what
was expected (exit 2), never a traceback or exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from pdevision.cli import main
from pdevision.engine.config import RunConfig, check_run
from pdevision.models.factory import create_model

CLASSES = [str(i) for i in range(10)]
META = {
    "kind": "classify",
    "model": "vheat_micro",
    "model_args": {"img_size": 32},
    "img_size": 32,
    "classes": CLASSES,
    "mean": list(IMAGENET_DEFAULT_MEAN),
    "std": list(IMAGENET_DEFAULT_STD),
    "epoch": 1,
}


def _checkpoint(folder: Path, meta: dict, state: dict[str, torch.Tensor] | None = None) -> Path:
    if state is None:
        torch.manual_seed(0)
        state = create_model("vheat_micro", num_classes=10, img_size=32).state_dict()
    folder.mkdir(parents=True)
    save_file(
        {k: v.contiguous() for k, v in state.items()},
        str(folder / "model.safetensors"),
        metadata={k: json.dumps(v) for k, v in meta.items()},
    )
    return folder


def _image(tmp_path: Path) -> Path:
    image = tmp_path / "photo.png"
    Image.fromarray((np.arange(40 * 40 * 3) % 251).astype(np.uint8).reshape(40, 40, 3)).save(image)
    return image


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.count("\n") == 1 and "Traceback" not in err and "RuntimeError" not in err, err
    return err


def test_a_good_crafted_checkpoint_predicts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The control: the crafting itself makes a checkpoint ``predict`` takes."""
    ckpt = _checkpoint(tmp_path / "ok", META)
    assert main(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))]) == 0
    assert "photo.png" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change",
    [
        {"classes": ["a", "b", "c"]},  # 3 classes, a 10-way head in the file
        {"model_args": {"img_size": 32, "dims": 48}},  # other widths than the weights
    ],
    ids=["classes", "widths"],
)
def test_weights_of_another_shape_are_one_line(change: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Weights whose shapes differ from the model the metadata describes ended in load_state_dict's RuntimeError
    (exit 1, every mismatch listed); now a CheckpointError naming the first weight and both shapes."""
    ckpt = _checkpoint(tmp_path / "ckpt", {**META, **change})
    err = _one_line_exit_2(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], capsys)
    assert "does not fit vheat_micro" in err and "shapes differ" in err and "in the file" in err, err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mean", "abc"),
        ("mean", [0.1, 0.1, 0.1, 0.1, 0.1]),
        ("mean", [float("nan")] * 3),
        ("std", [0, 0, 0]),
        ("std", [1e-300] * 3),
        ("std", [True, True, True]),
    ],
)
def test_bad_normalisation_in_the_metadata_is_one_line(
    field: str, value: object, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A mean or std of the wrong length ended in a RuntimeError of tensor sizes (exit 1); a string in "too many
    dimensions 'str'", a zero std in torchvision's division-by-zero message, neither naming the checkpoint."""
    ckpt = _checkpoint(tmp_path / "ckpt", {**META, field: value})
    for argv in (
        ["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))],
        ["eval", "--checkpoint", str(ckpt), "--output", str(tmp_path / "ev")],
    ):
        err = _one_line_exit_2(argv, capsys)
        assert "model.safetensors" in err and f"its {field} must be a list of 3 finite numbers" in err, err
    assert not (tmp_path / "ev").exists()


def test_a_kind_that_is_not_a_name_is_named_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``"kind": 7`` was reported as "a checkpoint of kind None"."""
    ckpt = _checkpoint(tmp_path / "ckpt", {**META, "kind": 7})
    err = _one_line_exit_2(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], capsys)
    assert "its kind must be a task name, got 7" in err, err


@pytest.mark.parametrize("channels", [1_000_000_000, 0, "64"])
def test_absurd_decoder_channels_of_a_segment_checkpoint_are_one_line(
    channels: object, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``decoder_channels`` of 10**9 in a segment checkpoint asked the allocator for a terabyte (exit 1)."""
    meta = {**META, "kind": "segment", "head": "upernet", "decoder_channels": channels}
    ckpt = _checkpoint(tmp_path / "ckpt", meta, state={"x": torch.zeros(1)})
    err = _one_line_exit_2(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], capsys)
    assert "decoder_channels" in err and "from 1 to 16384" in err, err


@pytest.mark.parametrize("task", ["classify", "segment", "denoise", "pretrain"])
def test_an_unknown_optimizer_names_the_flag_before_anything_runs(
    task: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """timm's own message ("Optimizer nosuchopt not found in registry") named no flag, and came after the data."""
    out = tmp_path / "run"
    code = main(["train", "--task", task, "--opt", "nosuchopt", "--epochs", "1", "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "--opt" in err and "'nosuchopt'" in err and "timm.optim.list_optimizers()" in err, err
    assert not out.exists()


def test_timm_optimizer_names_are_accepted() -> None:
    for name in ("sgd", "momentum", "AdamW", "lookahead_adamw", "lamb"):
        check_run(RunConfig(opt=name))


# -- issue 26: the new models through the same checkpoint and command paths ---------------------------------------
PDEFORMER = {**META, "model": "pdeformer_micro", "model_args": {"mixer": "wave", "dims": 8, "depths": [1, 1, 1, 1]}}


def _pdeformer_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return create_model("pdeformer_micro", num_classes=10, **PDEFORMER["model_args"]).state_dict()


def test_a_crafted_pdeformer_checkpoint_predicts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = _checkpoint(tmp_path / "ok", PDEFORMER, _pdeformer_state())
    assert main(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))]) == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"mixer": "fourier"}, "mixer must be one of"),
        ({"mixer": "attention", "dims": 40}, "multiples of head_dim"),
        ({"mixer": "heat", "fve_size": 4096}, "fve_size must be an integer from 1 to 256"),
        ({"mixer": "pooling", "equation": "eq4"}, "equation"),  # an option of another mixer: refused, not dropped
        ({"stem": "vit"}, "stem must be one of"),
        ({"stem": 3}, "stem must be one of"),
    ],
    ids=["unknown-mixer", "attention-widths", "fve-size", "foreign-option", "unknown-stem", "stem-not-a-name"],
)
def test_bad_mixer_arguments_in_a_checkpoint_are_one_line(
    args: dict, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    meta = {**PDEFORMER, "model_args": {**PDEFORMER["model_args"], **args}}
    ckpt = _checkpoint(tmp_path / "ckpt", meta, _pdeformer_state())
    for command in (["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], ["eval", "--checkpoint", str(ckpt)]):
        assert expected in _one_line_exit_2(command, capsys)


def test_vheat_weights_under_waveformer_metadata_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The two families share every key but the wave operator's c and alpha: the loader names what is missing."""
    ckpt = _checkpoint(tmp_path / "ckpt", {**META, "model": "waveformer_micro"})
    err = _one_line_exit_2(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], capsys)
    assert "waveformer_micro" in err and ".mixer.c" in err, err


def test_a_patch_stem_checkpoint_without_its_stem_argument_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A pdeformer_micro trained before the conv stem became the default: the loader names the missing stem weights;
    the stem argument rebuilds it."""
    torch.manual_seed(0)
    state = create_model("pdeformer_micro", num_classes=10, stem="patch", **PDEFORMER["model_args"]).state_dict()
    ckpt = _checkpoint(tmp_path / "old", PDEFORMER, state)
    err = _one_line_exit_2(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))], capsys)
    assert "stem.conv1.weight" in err, err
    meta = {**PDEFORMER, "model_args": {**PDEFORMER["model_args"], "stem": "patch"}}
    ckpt = _checkpoint(tmp_path / "patch", meta, state)
    assert main(["predict", "--checkpoint", str(ckpt), str(_image(tmp_path))]) == 0


@pytest.mark.parametrize("task", ["segment", "detect"])
def test_a_bad_mixer_is_one_line_in_the_dense_tasks(task: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["train", "--task", task, "--model", "pdeformer_micro", "--model-args", '{"mixer": "fourier"}']
    err = _one_line_exit_2([*argv, "--output", str(tmp_path / task), "--epochs", "1"], capsys)
    assert "mixer must be one of" in err
    assert not (tmp_path / task).exists()
