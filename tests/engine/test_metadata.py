"""The one reader of checkpoint metadata (issue 37): bounded in size and depth, one line naming the file; and
fuzzed through ``pdevision predict``: generated metadata (types, nesting, sizes, unicode, numbers at the limits)
gives exit 0 with a prediction, or exit 2 with one line, never a traceback or exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import safetensors.torch
from hypothesis import HealthCheck, given, settings
from PIL import Image

from pdevision.cli import main
from pdevision.engine.checkpoint import CheckpointError, parse_checkpoint_metadata
from pdevision.engine.metadata import MAX_JSON_DEPTH, MAX_METADATA_BYTES, MetadataError, json_depth, parse_json
from pdevision.engine.modeling import model_from_meta
from pdevision.engine.save import save_checkpoint
from pdevision.models.factory import create_model


def test_json_depth_counts_brackets_outside_strings() -> None:
    assert json_depth('{"a": [1, [2, {"b": "[[[["}]]}') == 4
    assert json_depth('"[{"') == 0 and json_depth("3") == 0 and json_depth("[]") == 1
    assert json_depth('["\\"[[["]') == 1  # an escaped quote does not end the string


def test_parse_json_refuses_depth_size_and_digits_with_a_reason() -> None:
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(MetadataError, match=f"nested {MAX_JSON_DEPTH + 1} levels deep"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(MetadataError, match="nested 1000000 levels deep"):  # far past the recursion limit
        parse_json("[" * 10**6)
    with pytest.raises(MetadataError, match="characters"):
        parse_json(" " * (MAX_METADATA_BYTES + 1))
    with pytest.raises(MetadataError, match="cannot be read as JSON"):
        parse_json("1" * 5000)  # above Python's digit limit for int()
    with pytest.raises(MetadataError, match="not JSON"):
        parse_json("{'single': 'quotes'}")


def test_checkpoint_metadata_over_the_total_size_names_the_file() -> None:
    raw = {f"k{i}": json.dumps("x" * (MAX_METADATA_BYTES // 4)) for i in range(5)}
    with pytest.raises(CheckpointError, match=r"checkpoint file f\.safetensors has [\d,]+ characters of metadata"):
        parse_checkpoint_metadata(raw, "f.safetensors")


# -- the fuzz, through the command line ------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 16384, 16385, 2**31, 2**63, -(2**63), 10**300]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_TEXT = st.one_of(st.text(max_size=20), st.sampled_from(["vheat_micro", "classify", "segment", "restoration", "."]))
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_TEXT, inner, max_size=5)),
    max_leaves=25,
)
_RAW = st.one_of(  # values no json.dumps writes: deep nesting, digits past the limit, not JSON at all
    st.integers(min_value=MAX_JSON_DEPTH - 2, max_value=5000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.text(max_size=30),
)
_KEYS = st.sampled_from(["model", "model_args", "classes", "kind", "img_size", "mean", "std", "epoch", "head", "task"])
_CHANGES = st.dictionaries(st.one_of(_KEYS, st.text(max_size=8)), st.one_of(_JSON.map(json.dumps), _RAW), max_size=4)
_ARG_CHANGES = st.dictionaries(
    st.sampled_from(["depths", "dims", "in_chans", "num_classes", "img_size", "mixer", "hcl_steps", "x"]),
    _JSON,
    max_size=3,
)

FAST = settings(
    max_examples=12,
    deadline=10000,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LONG = settings(
    max_examples=1000, deadline=30000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("meta")
    model = create_model("vheat_micro", num_classes=2)
    meta = {"model": "vheat_micro", "classes": ["a", "b"], "kind": "classify", "model_args": {}, "img_size": 32}
    folder = save_checkpoint(root, "best", model, meta)
    image = root / "photo.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(image)
    weights = safetensors.torch.load_file(str(folder / "model.safetensors"))
    return {"folder": folder, "image": image, "weights": weights, "meta": meta}


def _predict_with(base: dict[str, Any], raw: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    folder: Path = base["folder"]
    metadata = {**{k: json.dumps(v) for k, v in base["meta"].items()}, **raw}
    safetensors.torch.save_file(base["weights"], str(folder / "model.safetensors"), metadata=metadata)
    try:
        code = main(["predict", "--checkpoint", str(folder), str(base["image"])])
    except SystemExit as exc:  # the parser's own exit
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, (raw, err)
    if code == 0:
        assert "photo.png" in out, (raw, out)
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 2100, (raw, code, err)  # one_line: 2000


def _fuzz(base: dict[str, Any], data: st.DataObject, capsys: pytest.CaptureFixture[str]) -> None:
    if data.draw(st.booleans(), label="model_args only"):
        args = data.draw(_ARG_CHANGES, label="model_args")
        raw = {"model_args": json.dumps(args)}
    else:
        raw = data.draw(_CHANGES, label="metadata")
    _predict_with(base, raw, capsys)


@FAST
@given(data=st.data())
def test_fuzzed_checkpoint_metadata_gives_a_prediction_or_one_line(
    base: dict[str, Any], data: st.DataObject, capsys: pytest.CaptureFixture[str]
) -> None:
    _fuzz(base, data, capsys)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_fuzzed_checkpoint_metadata_long_run(
    base: dict[str, Any], data: st.DataObject, capsys: pytest.CaptureFixture[str]
) -> None:
    _fuzz(base, data, capsys)


@pytest.mark.parametrize("size", ["null", "0", "1e9", "true", '"32"', "[32, null]"])
def test_an_image_size_that_is_not_a_side_in_pixels_is_one_line(
    size: str, base: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the long fuzz run: ``img_size: null`` reached the evaluation transform as a TypeError (exit 1)."""
    folder: Path = base["folder"]
    metadata = {**{k: json.dumps(v) for k, v in base["meta"].items()}, "img_size": size}
    safetensors.torch.save_file(base["weights"], str(folder / "model.safetensors"), metadata=metadata)
    assert main(["predict", "--checkpoint", str(folder), str(base["image"])]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "in the checkpoint is not an integer from 1 to 16384" in line


def test_an_image_size_of_height_and_width_predicts(base: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    folder: Path = base["folder"]
    metadata = {
        **{k: json.dumps(v) for k, v in base["meta"].items()},
        "img_size": "[64, 64]",
    }  # the base model's own size
    safetensors.torch.save_file(base["weights"], str(folder / "model.safetensors"), metadata=metadata)
    assert main(["predict", "--checkpoint", str(folder), str(base["image"])]) == 0
    assert "photo.png" in capsys.readouterr().out


@pytest.mark.parametrize("side", [32, 64])
def test_an_image_size_as_int_or_as_pair_builds_the_same_model(side: int) -> None:
    """The metadata's ``img_size`` as ``side`` and as ``[side, side]`` describe one model (the pair is what a timm
    file's ``input_size`` gives)."""
    meta = {"model": "vheat_micro", "model_args": {}}
    one = model_from_meta({**meta, "img_size": side}, 2)
    pair = model_from_meta({**meta, "img_size": [side, side]}, 2)
    shapes = {n: tuple(p.shape) for n, p in one.state_dict().items()}
    assert shapes == {n: tuple(p.shape) for n, p in pair.state_dict().items()}
    assert shapes["stages.0.freq_embed"] == (side // 4, side // 4, 32)  # the stem's stride 4: built at this side
