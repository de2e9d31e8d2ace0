"""Issue 37's closing sweep, released weights and foreign checkpoint formats: timm / Hugging Face folders
(``config.json`` + ``model.safetensors`` / ``pytorch_model.bin``), timm ``.pth.tar`` files and the authors' ``.pth``,
each crafted as a hostile user would and given to ``pdevision predict``; ``timm.create_model`` with a local file
overlay; ``train --pretrained`` with no network. Each case is a prediction (asserted) or one line, exit 2, naming what
was wrong; nothing reaches the network."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file

from pdevision.engine.modeling import create_model
from tests.engine.test_formats import to_authors_layout
from tests.helpers import exit_code

CLASSES = [str(i) for i in range(10)]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model("vheat_micro", num_classes=10, img_size=32).eval()


@pytest.fixture(scope="module")
def hub(model: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A timm / Hugging Face folder as ``save_for_hf`` writes it with safetensors (no pdevision metadata)."""
    folder = tmp_path_factory.mktemp("hub") / "vheat"
    timm.models.save_for_hf(model, folder, model_config={"label_names": CLASSES}, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def image(digit_png: Path) -> Path:
    return digit_png


def _predict(checkpoint: Path, image: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = exit_code(["predict", "--checkpoint", str(checkpoint), str(image)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def _assert_outcome(code: int, out: str, err: str, expected: str | None, image: Path) -> None:
    if expected is None:  # a correct result: the image is classified into one of the checkpoint's classes
        assert code == 0, err
        assert image.name in out and any(f" {c}" in out for c in CLASSES), out
    else:
        assert code == 2, (code, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert expected in err, err


def _config(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def _weights(change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        state = change(load_file(str(folder / "model.safetensors")))
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))

    return edit


def _raw(name: str, data: bytes | Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        old = (folder / name).read_bytes() if (folder / name).exists() else b""
        (folder / name).write_bytes(data(old) if callable(data) else data)

    return edit


def _replace(name: str, how: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / name
        path.unlink()
        if how == "folder":
            path.mkdir()
        elif how == "fifo":
            os.mkfifo(path)
        elif how == "dangling":
            path.symlink_to(folder / "nowhere")
        elif how == "loop":
            os.symlink(name, path)

    return edit


def _bin_only(write: Callable[[Path, dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        state = load_file(str(folder / "model.safetensors"))
        (folder / "model.safetensors").unlink()
        write(folder / "pytorch_model.bin", state)

    return edit


HUB_CASES = {
    "good": (lambda f: None, None),
    "weights-fp16": (_weights(lambda s: {k: v.half() for k, v in s.items()}), None),
    "weights-fp64": (_weights(lambda s: {k: v.double() for k, v in s.items()}), None),
    "weights-int64": (_weights(lambda s: {k: v.long() for k, v in s.items()}), None),
    "weights-wrong-shape": (_weights(lambda s: {**s, "head.fc.bias": torch.zeros(3, 3)}), "(3, 3) in the file"),
    "weights-extra-key": (_weights(lambda s: {**s, "bogus.weight": torch.zeros(2)}), "1 unexpected ['bogus.weight']"),
    "weights-missing-key": (
        _weights(lambda s: {k: v for k, v in s.items() if k != "head.fc.bias"}),
        "1 weights missing ['head.fc.bias']",
    ),
    "weights-none": (_weights(lambda s: {}), "117 weights missing"),
    "weights-nan": (_weights(lambda s: {**s, "norm.weight": s["norm.weight"] * float("nan")}), "non-finite weights"),
    "weights-inf": (_weights(lambda s: {**s, "head.fc.bias": s["head.fc.bias"] + float("inf")}), "non-finite"),
    "safetensors-truncated": (_raw("model.safetensors", lambda b: b[: len(b) // 2]), "corrupt or truncated"),
    "safetensors-5-bytes": (_raw("model.safetensors", lambda b: b[:5]), "corrupt or truncated"),
    "safetensors-empty": (_raw("model.safetensors", b""), "corrupt or truncated"),
    "safetensors-huge-header": (_raw("model.safetensors", struct.pack("<Q", 2**62) + b"{}"), "header too large"),
    "safetensors-garbage-header": (_raw("model.safetensors", struct.pack("<Q", 9) + b"not json!"), "corrupt"),
    "safetensors-folder": (_replace("model.safetensors", "folder"), "model.safetensors is a folder"),
    "safetensors-fifo": (_replace("model.safetensors", "fifo"), "model.safetensors is a FIFO"),
    "safetensors-dangling-link": (_replace("model.safetensors", "dangling"), "no checkpoint at"),
    "safetensors-link-loop": (_replace("model.safetensors", "loop"), "no checkpoint at"),
    "config-folder": (_replace("config.json", "folder"), "config.json is a folder"),
    "config-fifo": (_replace("config.json", "fifo"), "config.json is a FIFO"),
    "config-missing": (lambda f: (f / "config.json").unlink(), "names no model"),
    "config-not-json": (_raw("config.json", b"{not json"), "config.json is not a JSON model config"),
    "config-empty": (_raw("config.json", b""), "config.json is not a JSON model config"),
    "config-list": (_raw("config.json", b"[1, 2]"), "names no architecture"),
    "config-nested-100000": (_raw("config.json", b"[" * 100000 + b"]" * 100000), "nested 100000 levels"),
    "config-utf8-bom": (_raw("config.json", lambda b: b"\xef\xbb\xbf" + b), "not a JSON model config"),
    "config-not-utf8": (_raw("config.json", b'{"architecture": "\xff"}'), "can't decode byte 0xff"),
    "architecture-missing": (_config(lambda c: c.pop("architecture")), "names no architecture"),
    "architecture-number": (_config(lambda c: c.update(architecture=5)), "names no architecture"),
    "architecture-unknown": (_config(lambda c: c.update(architecture="nosuch_model")), "unknown model 'nosuch_model'"),
    "architecture-hf-hub": (_config(lambda c: c.update(architecture="hf-hub:timm/resnet18.a1_in1k")), "no hub"),
    "architecture-other-family": (_config(lambda c: c.update(architecture="hcnet_micro")), "does not fit hcnet_micro"),
    "architecture-timm-model": (_config(lambda c: c.update(architecture="resnet18")), "does not fit resnet18"),
    "num-classes-negative": (_config(lambda c: c.update(num_classes=-1)), "num_classes must be a whole number"),
    "num-classes-string": (_config(lambda c: c.update(num_classes="10")), "num_classes must be a whole number"),
    "num-classes-bool": (_config(lambda c: c.update(num_classes=True)), "num_classes must be a whole number"),
    "num-classes-float": (_config(lambda c: c.update(num_classes=10.0)), "num_classes must be a whole number"),
    "num-classes-10e12": (_config(lambda c: c.update(num_classes=10**12)), "from 0 to 1,000,000, got 1000000000000"),
    # the class names are checked against the classifier's count where they are read (before the weights)
    "num-classes-other": (_config(lambda c: c.update(num_classes=5)), "label_names must be a list of 5 class names"),
    "labels-too-few": (_config(lambda c: c.update(label_names=["a", "b"])), "label_names must be a list of 10 class"),
    "labels-as-dict": (_config(lambda c: c.update(label_names={str(i): str(i) for i in range(10)})), None),
    "labels-nested": (_config(lambda c: c.update(label_names=[[1]] * 10)), "label_names must be a list of 10 class"),
    "source-url-hub-file": (
        _config(lambda c: c["pretrained_cfg"].update(url="http://127.0.0.1:9/w.pth", hf_hub_id="timm/x", file="/x")),
        None,
    ),
    "model-args-pretrained": (_config(lambda c: c.update(model_args={"pretrained": True})), "could make the library"),
    "model-args-checkpoint-path": (
        _config(lambda c: c.update(model_args={"checkpoint_path": "w.pth"})),
        "could make the library download or read other weights",
    ),
    "model-args-overlay": (
        _config(lambda c: c.update(model_args={"pretrained_cfg_overlay": {"file": "w.pth"}})),
        "could make the library download or read other weights",
    ),
    "model-args-list": (_config(lambda c: c.update(model_args=[1])), None),
    "model-args-img-size-huge": (_config(lambda c: c.update(model_args={"img_size": 10**9})), "above 16384"),
    "model-args-img-size-string": (_config(lambda c: c.update(model_args={"img_size": "32"})), "not an integer"),
    "mean-strings": (_config(lambda c: c["pretrained_cfg"].update(mean=["a", "b", "c"])), "its mean must be a list"),
    "mean-one-for-all": (_config(lambda c: c["pretrained_cfg"].update(mean=[0.5])), None),
    "std-zero": (_config(lambda c: c["pretrained_cfg"].update(std=[0, 0, 0])), "its std must be a list of 3 finite"),
    "pretrained-cfg-list": (_config(lambda c: c.update(pretrained_cfg=[1])), None),
    "bin-only": (_bin_only(lambda p, s: torch.save(s, p)), None),
    "bin-pickle-of-code": (
        _bin_only(lambda p, s: torch.save({"x": argparse.ArgumentParser}, p)),
        "holds objects other than weights (argparse.ArgumentParser)",
    ),
    "bin-truncated": (
        _bin_only(lambda p, s: (torch.save(s, p), p.write_bytes(p.read_bytes()[:1000]))),
        "cannot be read as a PyTorch file of weights",
    ),
    "bin-folder": (_bin_only(lambda p, s: p.mkdir()), "no checkpoint at"),
}


# what builds the model (a prediction, a refusal of its weights, the search of the authors' layout among every
# registered model) takes seconds on a shared 2-core machine: those run with the slow tests, a control of each kind
# and every refusal of metadata in make test
_BUILDS = ("in the file", "missing", "unexpected", "non-finite", "does not fit", "none of the registered")
_QUICK = ("good", "timm-good", "weights-nan")


def _params(cases: dict[str, tuple[object, str | None]]) -> list:
    def slow(name: str, expected: str | None) -> bool:
        builds = expected is None or any(word in expected for word in _BUILDS) or name.startswith("authors")
        return builds and name not in _QUICK

    return [pytest.param(n, marks=pytest.mark.slow if slow(n, e) else ()) for n, (_, e) in cases.items()]


@pytest.mark.parametrize("case", _params(HUB_CASES))
def test_a_crafted_timm_folder_predicts_or_is_one_line(
    case: str, hub: Path, image: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_network: list
) -> None:
    edit, expected = HUB_CASES[case]
    folder = tmp_path / "hub"
    shutil.copytree(hub, folder)
    edit(folder)
    _assert_outcome(*_predict(folder, image, capsys), expected, image)
    assert not no_network  # a URL, a hub id or a file in config.json is never followed


@pytest.mark.slow
def test_the_folders_model_safetensors_named_directly_predicts(
    hub: Path, image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_outcome(*_predict(hub / "model.safetensors", image, capsys), None, image)


def test_a_loose_safetensors_file_names_what_is_expected(
    model: torch.nn.Module, image: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was "no checkpoint at FOLDER (expected a folder with model.safetensors)", naming the folder."""
    path = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    _assert_outcome(*_predict(path, image, capsys), "weights.safetensors: a .safetensors file is read as", image)


def _ns(**values: object) -> argparse.Namespace:
    base = {"model": "vheat_micro", "img_size": None, "input_size": None, "mean": None, "std": None, "in_chans": None}
    return argparse.Namespace(**{**base, **values})


def _timm(state: dict, **values: object) -> dict:
    return {"arch": "vheat_micro", "state_dict": state, "args": _ns(**values)}


TORCH_CASES: dict[str, tuple[Callable[[dict, tuple], object], str | None]] = {
    "timm-good": (lambda s, d: _timm(s, img_size=32), None),
    "timm-args-a-dict": (lambda s, d: {"arch": "vheat_micro", "state_dict": s, "args": {"img_size": 32}}, None),
    "timm-no-args": (lambda s, d: {"arch": "vheat_micro", "state_dict": s}, None),
    "timm-arch-unknown": (lambda s, d: {**_timm(s), "arch": "nosuch"}, "unknown model 'nosuch'"),
    "timm-arch-hf-hub": (lambda s, d: {**_timm(s), "arch": "hf-hub:timm/x"}, "no hub or file references"),
    "timm-arch-local-dir": (lambda s, d: {**_timm(s), "arch": "local-dir:w"}, "no hub or file references"),
    "timm-img-size-huge": (lambda s, d: _timm(s, img_size=10**9), "not an integer from 1 to 16384"),
    "timm-img-size-negative": (lambda s, d: _timm(s, img_size=-3), "not an integer from 1 to 16384"),
    "timm-img-size-string": (lambda s, d: _timm(s, img_size="32"), "not an integer from 1 to 16384"),
    "timm-input-size-empty": (lambda s, d: _timm(s, input_size=[]), None),
    "timm-input-size-an-int": (lambda s, d: _timm(s, input_size=5), None),  # was a TypeError traceback
    "timm-mean-strings": (lambda s, d: _timm(s, mean=["a", "b", "c"]), "its mean must be a list of 3 finite"),
    "timm-mean-nan": (lambda s, d: _timm(s, mean=[float("nan")] * 3), "its mean must be a list of 3 finite"),
    "timm-std-zero": (lambda s, d: _timm(s, std=[0.0] * 3), "its std must be a list of 3 finite numbers above"),
    "timm-in-chans-0": (lambda s, d: _timm(s, in_chans=0), "in_chans=0 in the checkpoint must be a positive"),
    "timm-in-chans-1-of-rgb-weights": (lambda s, d: _timm(s, in_chans=1), "(16, 3, 3, 3) in the file"),
    "timm-in-chans-huge": (lambda s, d: _timm(s, in_chans=10**6), "in_chans=1000000 in the checkpoint is above"),
    "timm-non-tensor-values": (lambda s, d: _timm({**s, "note": 5, 3: torch.zeros(1)}), None),
    "timm-empty-state": (lambda s, d: _timm({}), "holds no tensors"),
    "timm-nan-weights": (lambda s, d: _timm({**s, "norm.weight": s["norm.weight"] * float("nan")}), "non-finite"),
    "timm-module-prefix-on-some": (
        lambda s, d: _timm({("module." + k if i % 2 else k): v for i, (k, v) in enumerate(s.items())}),
        None,
    ),
    "timm-fp16": (lambda s, d: _timm({k: v.half() for k, v in s.items()}), None),
    "authors-good": (lambda s, d: {"model": to_authors_layout(s, d)}, None),
    "authors-bare": (lambda s, d: to_authors_layout(s, d), None),
    "authors-empty-model-beside-ema": (lambda s, d: {"model": {}, "model_ema": to_authors_layout(s, d)}, None),
    "authors-module-prefix": (
        lambda s, d: {"model": {"module." + k: v for k, v in to_authors_layout(s, d).items()}},
        None,
    ),
    "authors-module-prefix-on-some": (
        lambda s, d: {
            "model": {("module." + k if i % 3 else k): v for i, (k, v) in enumerate(to_authors_layout(s, d).items())}
        },
        None,
    ),
    "authors-nested-three-deep": (lambda s, d: {"model": {"model": {"model": to_authors_layout(s, d)}}}, "no tensors"),
    "authors-non-tensor-values": (lambda s, d: {"model": {**to_authors_layout(s, d), "layers.0.0.note": "x"}}, None),
    "authors-missing-key": (
        lambda s, d: {"model": dict(list(to_authors_layout(s, d).items())[1:])},
        "holds weights of none of the registered models",
    ),
    "authors-extra-block": (
        lambda s, d: {"model": {**to_authors_layout(s, d), "layers.0.99.op.weight": torch.zeros(3)}},
        "none of the registered models",
    ),
    "authors-stage-past-the-last": (
        lambda s, d: {"model": {**to_authors_layout(s, d), "layers.7.0.op.weight": torch.zeros(3)}},
        "none of the registered models",
    ),
    "authors-wrong-shape": (
        lambda s, d: {"model": {**to_authors_layout(s, d), "patch_embed.conv1.weight": torch.zeros(1, 1)}},
        "none of the registered models",
    ),
    "authors-scalars": (lambda s, d: {k: torch.tensor(1.0) for k in to_authors_layout(s, d)}, "none of the registered"),
    "authors-integer-keys": (lambda s, d: dict(enumerate(s.values())), "holds no tensors"),
    "a-list": (lambda s, d: [s], "holds a list, not a dict of weights"),
    "a-pickle-of-code": (lambda s, d: {"x": argparse.ArgumentParser}, "holds objects other than weights"),
}


@pytest.mark.parametrize("case", _params(TORCH_CASES))
def test_a_crafted_timm_or_authors_file_predicts_or_is_one_line(
    case: str, model: torch.nn.Module, image: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, expected = TORCH_CASES[case]
    path = tmp_path / ("model_best.pth.tar" if case.startswith("timm") else "vHeat_micro.pth")
    torch.save(make(model.state_dict(), model.depths), path)
    _assert_outcome(*_predict(path, image, capsys), expected, image)


def test_a_one_channel_timm_file_predicts_with_one_mean_for_its_channel(
    image: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timm file of a grey model (``in_chans`` 1, mean and std at timm's defaults) was refused: ImageNet's three
    means for one channel."""
    grey = create_model("vheat_micro", num_classes=10, img_size=32, in_chans=1)
    path = tmp_path / "model_best.pth.tar"
    torch.save(_timm(grey.state_dict(), img_size=32, in_chans=1), path)
    _assert_outcome(*_predict(path, image, capsys), None, image)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("folder", "no checkpoint at"),
        ("fifo", "is a FIFO, not a checkpoint file or folder"),
        pytest.param("link", None, marks=pytest.mark.slow),
        ("dangling", "no checkpoint at"),
        ("zip-without-weights", "cannot be read as a PyTorch file of weights"),
        ("text", "cannot be read as a PyTorch file of weights"),
        pytest.param("no-suffix", None, marks=pytest.mark.slow),
    ],
)
def test_special_files_named_as_weights(
    kind: str,
    expected: str | None,
    model: torch.nn.Module,
    image: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import zipfile

    good = tmp_path / "good.pth"
    torch.save({"model": to_authors_layout(model.state_dict(), model.depths)}, good)
    path = tmp_path / ("weights" if kind == "no-suffix" else "weights.pth")
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        path.symlink_to(good)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    elif kind == "zip-without-weights":
        zipfile.ZipFile(path, "w").writestr("a", "b")
    elif kind == "text":
        path.write_text("hello")
    else:
        shutil.copy(good, path)
    _assert_outcome(*_predict(path, image, capsys), expected, image)


def _overlay_file(kind: str, model: torch.nn.Module, folder: Path) -> Path:
    path = folder / ("w.safetensors" if "safetensors" in kind else "w.pth")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated-safetensors":
        save_file(state, str(path))
        path.write_bytes(path.read_bytes()[:100])
    elif kind == "pickle-of-code":
        torch.save({"x": argparse.ArgumentParser}, path)
    elif kind == "a-list":
        torch.save([1], path)
    elif kind == "text":
        path.write_text("hello")
    elif kind in ("good-safetensors", "good"):
        (save_file(state, str(path)) if kind == "good-safetensors" else torch.save(state, path))
    return path


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        ("missing", FileNotFoundError, "not found"),
        ("folder", ValueError, "is a folder, not a regular file"),
        ("fifo", ValueError, "is a FIFO, not a regular file"),
        ("empty", ValueError, "is empty"),
        ("truncated-safetensors", ValueError, "cannot be read as weights"),
        ("pickle-of-code", RuntimeError, "Unsupported globals: argparse.ArgumentParser"),
        ("a-list", ValueError, "it holds a list, not a state dict"),
        ("text", ValueError, "cannot be read as weights"),
        ("good", None, None),
        ("good-safetensors", None, None),
    ],
)
def test_create_model_with_a_local_file_overlay(
    kind: str, error: type | None, message: str | None, model: torch.nn.Module, tmp_path: Path, no_network: list
) -> None:
    """``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...))``: a file that is not weights
    is one clear exception naming it (a FIFO would block timm's reader); weights load with their trained head."""
    path = _overlay_file(kind, model, tmp_path)
    overlay = {"pretrained_cfg_overlay": dict(file=str(path))}
    if error is None:
        loaded = timm.create_model("vheat_micro", pretrained=True, img_size=32, **overlay).eval()
        assert loaded.num_classes == 10
        x = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x))
    else:
        with pytest.raises(error, match=message) as caught:
            timm.create_model("vheat_micro", pretrained=True, img_size=32, **overlay)
        assert str(path) in str(caught.value) or kind == "pickle-of-code"
    assert not no_network


PRETRAINED = ["train", "--pretrained", "--img-size", "32", "--epochs", "1", "--max-train-batches", "1"]
SMALL = ["--model-args", '{"depths": [1, 1, 1, 1], "dims": 16}']  # vheat_tiny's layout, built in a moment


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("offline", "HF_HUB_OFFLINE is set and"),
        ("network-unreachable", "the released weights could not be downloaded from https://github.com/MzeroMiko"),
        ("partial-file-in-the-cache", "cannot be read as a weights-only PyTorch file"),
        ("folder-in-the-cache", "in timm's cache is a folder, not a weights file"),
        ("unknown-tag", "vheat_tiny.nope has no released weights for --pretrained"),
        ("hub-name", "has no released weights for --pretrained"),
        ("no-release", "hcnet_micro has no released weights"),
    ],
)
def test_released_weights_without_a_network_are_one_line(
    case: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_network: list,
) -> None:
    """``train --pretrained`` with no network was exit 1 and two lines (timm's "Loading pretrained weights from url"
    and ``URLError``); ``HF_HUB_OFFLINE`` was not honoured (the GitHub URL was requested anyway)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    model = {"unknown-tag": "vheat_tiny.nope", "hub-name": "hf-hub:timm/resnet18.a1_in1k"}.get(case, "vheat_tiny")
    if case == "no-release":
        model = "hcnet_micro"
    if case == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    if case == "partial-file-in-the-cache":
        (cache / "vHeat_tiny.pth").write_bytes(b"PK\x03\x04 a partial download")
    if case == "folder-in-the-cache":
        (cache / "vHeat_tiny.pth").mkdir()
    out = tmp_path / "run"
    assert exit_code([*PRETRAINED, *SMALL, "--model", model, "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
    assert bool(no_network) == (case == "network-unreachable")  # the one case that asks, and is refused by the test
