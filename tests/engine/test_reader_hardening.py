"""Issue 61 on the one checkpoint reader: a foreign file's arguments typed where they are read (items 3), a Hugging
Face folder's class names checked (4), every size bounded where it enters (2), a refused raw pickle said in one line
with nothing before it (6); and a hypothesis fuzz of the reader over every format."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdevision.cli import main
from pdevision.engine.checkpoint import FORMATS, CheckpointError, checkpoint_format, read_meta
from pdevision.engine.save import save_checkpoint
from pdevision.models._arguments import MAX_SIZE

HEAD = {"head.fc.weight": torch.zeros(3, 8), "head.fc.bias": torch.zeros(3)}


SIZE = "img_size|image size"  # a size in the model arguments, or the image size of the metadata


def timm_file(folder: Path, **args: Any) -> Path:
    """A file of timm's train.py (``model_best.pth.tar``) whose ``args`` hold ``args`` over timm's defaults."""
    base = {"model": "vheat_micro", "img_size": None, "input_size": None, "mean": None, "std": None, "in_chans": None}
    file = folder / "model_best.pth.tar"
    torch.save({"arch": "vheat_micro", "state_dict": HEAD, "args": argparse.Namespace(**{**base, **args})}, file)
    return file


def hub_folder(folder: Path, **config: Any) -> Path:
    """A timm / Hugging Face folder: ``config.json`` (``config`` over a 3-class vheat_micro's) and its weights."""
    folder.mkdir(parents=True, exist_ok=True)
    base = {"architecture": "vheat_micro", "num_classes": 3, "pretrained_cfg": {"input_size": [3, 64, 64]}}
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    safetensors.torch.save_file(HEAD, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("img_size", torch.tensor([64, 64])),
        ("in_chans", torch.tensor(1)),
        ("mean", torch.zeros(3)),
        ("input_size", object()),
    ],
)
def test_a_timm_files_arguments_must_be_plain_values(tmp_path: Path, key: str, value: Any) -> None:
    with pytest.raises(CheckpointError) as err:
        read_meta(timm_file(tmp_path, **{key: value}))
    message = str(err.value)  # an object other than a tensor: weights_only refuses the file before its args are read
    assert f"args.{key}" in message if isinstance(value, torch.Tensor) else "holds objects other than" in message
    assert "\n" not in message


def test_a_tensor_in_a_timm_files_arguments_is_one_line_from_predict(
    tmp_path: Path, digit_png: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = timm_file(tmp_path, img_size=torch.tensor([64, 64]))
    assert main(["predict", "--checkpoint", str(file), str(digit_png)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "args.img_size" in err and "Tensor" in err


@pytest.mark.parametrize(
    "labels",
    [["a", "b"], ["a", "b", "c", "d"], ["a", [1, [2]], "c"], ["a", {"a": 1}, "c"], [1, 2, 3], "abc", {"0": "a"}],
)
def test_label_names_must_name_every_output_with_a_string(tmp_path: Path, labels: Any) -> None:
    with pytest.raises(CheckpointError, match="label_names must be a list of 3 class names"):
        read_meta(hub_folder(tmp_path / "hub", label_names=labels))


def test_label_names_that_fit_are_the_classes(tmp_path: Path) -> None:
    assert read_meta(hub_folder(tmp_path / "a", label_names=["x", "y", "z"]))["classes"] == ["x", "y", "z"]
    assert read_meta(hub_folder(tmp_path / "b", label_names={"0": "x", "1": "y", "2": "z"}))["classes"] == [
        "x",
        "y",
        "z",
    ]
    assert read_meta(hub_folder(tmp_path / "c"))["classes"] is None  # none given: the indices (or ImageNet's names)


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda d: hub_folder(d / "hub", model_args={"img_size": MAX_SIZE + 1}), SIZE),
        (lambda d: hub_folder(d / "hub", pretrained_cfg={"input_size": [3, 10**9, 10**9]}), SIZE),
        (lambda d: hub_folder(d / "hub", model_args={"img_size": [64, -1]}), SIZE),
        (lambda d: timm_file(d, img_size=MAX_SIZE + 1), SIZE),
        (lambda d: timm_file(d, input_size=[3, 10**12, 10**12]), SIZE),
        (lambda d: timm_file(d, img_size=True), SIZE),
        (lambda d: timm_file(d, in_chans=10**9), "in_chans"),
        (lambda d: timm_file(d, in_chans=2.5), "in_chans"),
    ],
)
def test_sizes_from_a_foreign_file_are_bounded_where_they_are_read(tmp_path: Path, make: Any, where: str) -> None:
    with pytest.raises(CheckpointError, match=where):
        read_meta(make(tmp_path))


def test_sizes_in_pdevision_metadata_are_bounded_where_they_are_read(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, "best", model, {"model": "vheat_micro", "kind": "classify", "img_size": 10**6})
    with pytest.raises(CheckpointError, match="image size 1000000 in the checkpoint is not an integer from 1 to"):
        read_meta(tmp_path / "best")


def raw_pickle(file: Path) -> Path:
    """A raw pickle (protocol 4, not torch.save's zip archive) that would call ``os.system`` if unpickled."""
    file.write_bytes(pickle.dumps({"weights": os.system}, protocol=4))
    return file


def test_a_refused_raw_pickle_warns_nothing_before_its_line(tmp_path: Path) -> None:
    file = raw_pickle(tmp_path / "weights.pth")
    with warnings.catch_warnings(record=True) as caught, pytest.raises(CheckpointError) as err:
        warnings.simplefilter("always")
        read_meta(file)
    assert [str(w.message) for w in caught] == []  # torch's "Detected pickle protocol 4" warning, before the fix
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("argv", [["predict", "--checkpoint", "{file}", "{png}"], ["eval", "--checkpoint", "{file}"]])
def test_a_refused_raw_pickle_is_one_line_on_the_command_line(
    tmp_path: Path, digit_png: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    file = raw_pickle(tmp_path / "weights.pth")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([a.format(file=file, png=digit_png) for a in argv]) == 2
    assert caught == [] and len(capsys.readouterr().err.strip().splitlines()) == 1


# ---- fuzz: whatever a file of any format holds, the reader answers with metadata or one CheckpointError ----

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
TENSORS = st.builds(torch.zeros, st.lists(st.integers(0, 3), max_size=3).map(tuple))
VALUES = PLAIN | TENSORS
KEYS = st.sampled_from(["img_size", "input_size", "in_chans", "mean", "std", "num_classes", "label_names", "model"])


def _write(fmt: str, folder: Path, fields: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "pdevision":
        meta = {"model": "vheat_micro", "kind": "classify", **{k: v for k, v in fields.items() if _json(v)}}
        save_checkpoint(folder, "best", torch.nn.Linear(2, 3), meta)
        return folder / "best"
    if fmt == "hub":
        config = {"architecture": "vheat_micro", "num_classes": 3, "model_args": {}, "pretrained_cfg": {}}
        for key, value in fields.items():
            if _json(value):
                target = config["model_args"] if key in ("img_size", "in_chans") else config
                target[key] = value
        return hub_folder(folder / "hub", **config)
    if fmt == "timm":
        return timm_file(folder, **fields)
    file = folder / "weights.pth"  # the authors': a dict of anything, with tensors under wrapper keys or not
    torch.save({"model": {k: v for k, v in fields.items() if isinstance(v, torch.Tensor)}, **fields}, file)
    return file


def _json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(FORMATS[:3]), fields=st.dictionaries(KEYS, VALUES, max_size=4))
def test_the_reader_answers_any_file_with_metadata_or_one_checkpoint_error(
    tmp_path_factory: pytest.TempPathFactory, fmt: str, fields: dict[str, Any]
) -> None:
    path = _write(fmt, tmp_path_factory.mktemp("fuzz"), fields)
    try:
        meta = read_meta(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
        return
    assert checkpoint_format(path) == fmt
    size = meta.get("img_size")
    assert all(0 < v <= MAX_SIZE for v in (size if isinstance(size, list) else [size] if size is not None else []))
    classes = meta.get("classes")
    assert classes is None or all(isinstance(c, str) for c in classes)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(st.sampled_from(["model", "model_ema", "state_dict", "epoch", "x"]), VALUES, max_size=3))
def test_the_reader_answers_any_authors_file_with_metadata_or_one_checkpoint_error(
    tmp_path_factory: pytest.TempPathFactory, fields: dict[str, Any]
) -> None:
    path = _write("authors", tmp_path_factory.mktemp("fuzz"), fields)
    try:
        read_meta(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
