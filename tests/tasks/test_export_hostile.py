"""Issue 61's closing sweep, the meaning an export carries (ONNX ``metadata_props``, the ``.pt2`` archive's
``pdevision.json``, a hub folder's ``config.json`` and model card): checkpoints whose metadata holds hostile class
names (too many, too few, not strings, huge, with newlines and control characters), absurd mean and std, image sizes
that are no size, and outputs aimed at run folders, links into them and places that cannot be written. Each is one
line with exit 2 and nothing written, or an export whose metadata, read back, is what the checkpoint holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
import timm
import torch
from safetensors.torch import save_file

from pdevision.engine.save import save_checkpoint
from pdevision.tasks.export import PT2_METADATA
from tests.helpers import exit_code, one_line_exit_2

MODEL = "pderesnet_micro"
META = {
    "model": MODEL,
    "kind": "classify",
    "classes": ["cat", "dog", "eel"],
    "model_args": {},
    "img_size": 32,
    "mean": [0.5, 0.4, 0.3],
    "std": [0.2, 0.25, 0.3],
}


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {k: v.contiguous() for k, v in timm.create_model(MODEL, num_classes=3).state_dict().items()}


def _crafted(folder: Path, state: dict[str, torch.Tensor], **change: object) -> Path:
    """A checkpoint folder of the 3-class model whose metadata is ``META`` with ``change`` (``None``: left out),
    written by safetensors itself (the library's writer would not write most of these)."""
    meta = {k: v for k, v in {**META, **change}.items() if v is not None}
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"), metadata={k: json.dumps(v) for k, v in meta.items()})
    return folder


def _onnx_props(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


FORMATS = {"onnx": "m.onnx", "pt2": "m.pt2", "hub": "hub"}

# -- metadata that is refused ------------------------------------------------------------------------------------

REFUSED = {
    "classes-numbers": ({"classes": [1, 2, 3]}, "its classes must be a list of names"),
    "classes-nested": ({"classes": [["cat"], "dog", "eel"]}, "its classes must be a list of names"),
    "classes-a-string": ({"classes": "cat,dog,eel"}, "its classes must be a list of names"),
    "classes-a-mapping": ({"classes": {"0": "cat"}}, "its classes must be a list of names"),
    "classes-with-null": ({"classes": ["cat", None, "eel"]}, "its classes must be a list of names"),
    "classes-too-many": ({"classes": ["a", "b", "c", "d", "e"]}, "(3,) in the file, (5,) in the model"),
    "classes-too-few": ({"classes": ["a"]}, "(3,) in the file, (1,) in the model"),
    "classes-a-million-and-one": ({"classes": [str(i) for i in range(1_000_001)]}, "1,000,000"),
    "mean-nan": ({"mean": [float("nan")] * 3}, "its mean must be a list of 3 finite numbers"),
    "mean-two": ({"mean": [0.5, 0.5]}, "its mean must be a list of 3 finite numbers"),
    "mean-four": ({"mean": [0.5] * 4}, "its mean must be a list of 3 finite numbers"),
    "mean-a-string": ({"mean": "0.5"}, "its mean must be a list of 3 finite numbers"),
    "mean-nested": ({"mean": [[0.5], [0.5], [0.5]]}, "its mean must be a list of 3 finite numbers"),
    "std-negative": ({"std": [-0.2] * 3}, "its std must be a list of 3 finite numbers above zero"),
    "std-zero": ({"std": [0.0] * 3}, "its std must be a list of 3 finite numbers above zero"),
    "std-infinite": ({"std": [float("inf")] * 3}, "its std must be a list of 3 finite numbers above zero"),
    "std-booleans": ({"std": [True] * 3}, "its std must be a list of 3 finite numbers above zero"),
    "img-size-zero": ({"img_size": 0}, "image size 0 in the checkpoint is not an integer from 1 to 16384"),
    "img-size-negative": ({"img_size": -32}, "image size -32 in the checkpoint is not an integer from 1 to 16384"),
    "img-size-huge": ({"img_size": 10**9}, "is not an integer from 1 to 16384"),
    "img-size-a-string": ({"img_size": "32"}, "image size '32' in the checkpoint is not an integer"),
    "img-size-a-float": ({"img_size": 32.5}, "image size 32.5 in the checkpoint is not an integer"),
    "img-size-a-bool": ({"img_size": True}, "image size True in the checkpoint is not an integer"),
    "img-size-three-sides": ({"img_size": [32, 32, 32]}, "image size [32, 32, 32] in the checkpoint is not an integer"),
    "img-size-one-side-listed": ({"img_size": [32]}, "image size [32] in the checkpoint is not an integer"),
    "img-size-below-the-stride": ({"img_size": 8}, "its image size 8 px is below the 32 px"),
    "pair-below-the-stride": ({"img_size": [8, 64]}, "its image size 8 x 64 px is below the 32 px"),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", list(REFUSED))
def test_absurd_metadata_is_one_line_and_nothing_is_written(
    case: str, fmt: str, state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, message = REFUSED[case]
    checkpoint = _crafted(tmp_path / "ckpt", state, **change)
    output = tmp_path / FORMATS[fmt]
    err = one_line_exit_2(["export", checkpoint, "--format", fmt, "--output", output], capsys)
    assert message in err, err
    assert not output.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_image_size_that_is_a_tensor_in_a_timm_file_is_one_line(
    state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timm ``.pth.tar`` whose ``args.img_size`` is a tensor: refused where the arguments are read, naming the key."""
    file = tmp_path / "model.pth.tar"
    torch.save({"arch": MODEL, "state_dict": state, "args": {"img_size": torch.tensor([32, 32])}}, file)
    err = one_line_exit_2(["export", file, "--format", "onnx", "--output", tmp_path / "m.onnx"], capsys)
    assert "args.img_size must be a plain value" in err and "Tensor" in err, err
    assert not (tmp_path / "m.onnx").exists()


# -- metadata that is written, and read back as it was -------------------------------------------------------------

NAMES = {
    "newlines": ["a\nb", "c\r\nd", "e"],
    "controls": ["nul\x00", "bell\x07", "escape\x1b[31m"],
    "huge": ["x" * 100_000, "y", "z"],
    "unicode": ["猫", "🐕", "\u202eeel"],  # the last one with a right-to-left override
    "quotes-and-markdown": ['"cat"', "dog, eel", "# heading\n---"],
    "duplicates": ["same", "same", "same"],
    "empty-strings": ["", " ", "eel"],
}


@pytest.mark.parametrize("case", list(NAMES))
def test_hostile_class_names_are_read_back_from_onnx_as_written(
    case: str, state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = NAMES[case]
    checkpoint = _crafted(tmp_path / "ckpt", state, classes=names)
    output = tmp_path / "m.onnx"
    assert exit_code(["export", str(checkpoint), "--format", "onnx", "--output", str(output)]) == 0
    props = _onnx_props(output)
    assert json.loads(props["class_names"]) == names
    assert json.loads(props["mean"]) == META["mean"] and json.loads(props["std"]) == META["std"]
    assert json.loads(props["input_size"]) == [3, 32, 32] and props["model"] == MODEL


@pytest.mark.parametrize("case", list(NAMES))
def test_hostile_class_names_are_read_back_from_a_hub_folder_and_keep_its_card_whole(
    case: str, state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The names are in ``config.json`` as written; the model card shows them on its one ``Classes:`` line, escaped
    and cut (a newline in a name broke the line, a NUL went into the Markdown file)."""
    names = NAMES[case]
    checkpoint = _crafted(tmp_path / "ckpt", state, classes=names)
    output = tmp_path / "hub"
    assert exit_code(["export", str(checkpoint), "--format", "hub", "--output", str(output)]) == 0
    assert json.loads((output / "config.json").read_text())["label_names"] == names
    card = (output / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("Classes: "))
    assert len(line) < 400 and all(c.isprintable() for c in line), line
    assert card.count("\n---\n") == 1  # the front matter's end, once: no name added another
    assert timm.create_model(f"local-dir:{output}", pretrained=True).pretrained_cfg["label_names"] == names


def test_hostile_class_names_are_read_back_from_a_pt2_archive(state: dict, tmp_path: Path) -> None:
    names = NAMES["controls"] + NAMES["newlines"][:0]
    checkpoint = _crafted(tmp_path / "ckpt", state, classes=names)
    output = tmp_path / "m.pt2"
    assert exit_code(["export", str(checkpoint), "--format", "pt2", "--output", str(output)]) == 0
    extra = {PT2_METADATA: ""}
    torch.export.load(str(output), extra_files=extra)
    meta = json.loads(extra[PT2_METADATA])
    assert json.loads(meta["class_names"]) == names and json.loads(meta["std"]) == META["std"]


def test_an_unknown_interpolation_in_the_metadata_is_not_exported(state: dict, tmp_path: Path) -> None:
    """The checkpoint's own preprocessing is the library's evaluation transform; an ``interpolation`` key in its
    metadata is no part of it and never reaches the export."""
    checkpoint = _crafted(tmp_path / "ckpt", state, interpolation="lanczos9")
    output = tmp_path / "m.onnx"
    assert exit_code(["export", str(checkpoint), "--format", "onnx", "--output", str(output)]) == 0
    assert _onnx_props(output)["interpolation"] == "bicubic"


def test_one_mean_and_std_for_every_channel_are_exported_as_given(state: dict, tmp_path: Path) -> None:
    checkpoint = _crafted(tmp_path / "ckpt", state, mean=[0.5], std=[0.25])
    output = tmp_path / "m.onnx"
    assert exit_code(["export", str(checkpoint), "--format", "onnx", "--output", str(output)]) == 0
    props = _onnx_props(output)
    assert json.loads(props["mean"]) == [0.5] and json.loads(props["std"]) == [0.25]


@pytest.mark.parametrize("fmt", ["onnx", "hub"])
@pytest.mark.parametrize("size", [[32, 32], [32, 48]], ids=["square-pair", "non-square-pair"])
def test_an_image_size_given_as_a_pair_is_exported_at_that_size(
    size: list[int], fmt: str, state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reader takes (height, width); ``export`` read it with ``int()``: a ``TypeError``, exit 1."""
    checkpoint = _crafted(tmp_path / "ckpt", state, img_size=size)
    output = tmp_path / FORMATS[fmt]
    assert exit_code(["export", str(checkpoint), "--format", fmt, "--output", str(output)]) == 0, capsys.readouterr()
    if fmt == "onnx":
        assert json.loads(_onnx_props(output)["input_size"]) == [3, *size]
    else:
        assert json.loads((output / "config.json").read_text())["pretrained_cfg"]["input_size"] == [3, *size]


# -- outputs ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as the loop leaves it, with the folders a killed save and ``eval`` leave beside its checkpoints."""
    run = tmp_path_factory.mktemp("hostile") / "run"
    model = timm.create_model(MODEL, num_classes=3)
    for name in ("best", "last"):
        save_checkpoint(run, name, model, META)
    (run / "config.json").write_text(json.dumps({"task": "classify", "model": MODEL}))
    (run / "metrics.csv").write_text("epoch\n1\n")
    for folder in ("tensorboard", "eval-best", ".last.old", ".best.tmp-1-a"):
        (run / folder).mkdir()
    return run


OUTPUTS = {
    "eval-folder": ("onnx", "{run}/eval-best/m.onnx", "inside the run folder"),
    "tensorboard-folder": ("onnx", "{run}/tensorboard/m.onnx", "inside the run folder"),
    "backup-of-a-save": ("onnx", "{run}/.last.old/m.onnx", "inside the"),
    "temporary-folder-of-a-save": ("pt2", "{run}/.best.tmp-1-a/m.pt2", "inside the"),
    "pt2-in-best": ("pt2", "{run}/best/m.pt2", "inside the checkpoint folder"),
    "hub-in-last": ("hub", "{run}/last/hub", "inside the checkpoint folder"),
    "hub-beside-the-runs-files": ("hub", "{run}/exported", "inside the run folder"),
    "through-a-link-to-the-run": ("onnx", "{link}/m.onnx", "inside the"),
    "through-a-link-to-best": ("hub", "{best_link}/hub", "inside the"),
    "the-run-itself": ("hub", "{run}", "exists; export never overwrites"),
    "best-itself": ("hub", "{run}/best", "exists; export never overwrites"),
    "a-runs-file": ("onnx", "{run}/metrics.csv", "exists; export never overwrites"),
    "deeper-in-a-missing-folder": ("onnx", "{run}/best/sub/m.onnx", "does not exist"),
    "a-folder-that-cannot-be-written": ("onnx", "/sys/m.onnx", "cannot be written"),
    "a-hub-folder-that-cannot-be-written": ("hub", "/sys/hub", "cannot be written"),
    "a-file-as-the-folder": ("onnx", "{run}/metrics.csv/m.onnx", "does not exist"),
}


@pytest.mark.parametrize("case", list(OUTPUTS))
def test_an_output_aimed_at_a_run_or_an_unwritable_place_is_one_line(
    case: str, run: Path, state: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fmt, where, message = OUTPUTS[case]
    (tmp_path / "link").symlink_to(run)
    (tmp_path / "best_link").symlink_to(run / "best")
    output = where.format(run=run, link=tmp_path / "link", best_link=tmp_path / "best_link")
    checkpoint = _crafted(tmp_path / "ckpt", state)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    err = one_line_exit_2(["export", checkpoint, "--format", fmt, "--output", output], capsys)
    assert message in err, err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written, nothing touched
    assert not Path(output).exists() or case in ("the-run-itself", "best-itself", "a-runs-file")


def test_an_export_beside_the_run_is_written(run: Path, tmp_path: Path) -> None:
    """The control: beside the run (not inside it), the same checkpoint exports."""
    output = run.parent / f"beside-{os.getpid()}.onnx"
    assert exit_code(["export", str(run), "--format", "onnx", "--output", str(output)]) == 0
    assert json.loads(_onnx_props(output)["class_names"]) == META["classes"]
