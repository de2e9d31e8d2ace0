"""The command line reads what users have (a run folder, a timm / Hugging Face folder, timm's ``.pth.tar``, the
authors' ``.pth``) through the one checkpoint-to-model path, and a run's ``best/`` is a timm folder that
``timm.create_model("local-dir:...")`` and timm's ``load_checkpoint`` read, with its class names."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import timm
import torch

from pdevision.engine.checkpoint import CheckpointError, checkpoint_format
from pdevision.engine.hub import run_settings
from pdevision.engine.modeling import create_model, load_classifier, load_into_model
from pdevision.models.vheat import checkpoint_filter_fn
from pdevision.tasks.classify.evaluate import evaluate_checkpoint
from tests.helpers import digit_folder, exit_code

FAST = ["--epochs", "1", "--max-train-batches", "1", "--batch-size", "8", "--no-progress", "--threads", "1"]


def to_authors_layout(state: dict[str, torch.Tensor], depths: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """This library's vHeat state dict in the vHeat authors' layout (the inverse of ``checkpoint_filter_fn``):
    ``stem`` -> ``patch_embed``, blocks under ``layers.<stage>.<index>`` with ``op``, ``gamma1/2`` and 1x1-conv MLPs,
    the downsampling at the end of the previous stage, ``norm`` / ``head.fc`` -> ``classifier.0`` / ``.3``."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if m := re.match(r"^stem\.conv(\d)\.(.*)$", key):
            out[f"patch_embed.conv{m[1]}.{m[2]}"] = value
        elif m := re.match(r"^stem\.norm(\d)\.(.*)$", key):
            out[f"patch_embed.norm{m[1]}.1.{m[2]}"] = value
        elif m := re.match(r"^stages\.(\d+)\.freq_embed$", key):
            out[f"freq_embed.{m[1]}"] = value
        elif m := re.match(r"^stages\.(\d+)\.downsample\.(conv|norm)\.(.*)$", key):
            stage = int(m[1]) - 1
            out[f"layers.{stage}.{depths[stage]}.{0 if m[2] == 'conv' else 1}.{m[3]}"] = value
        elif m := re.match(r"^stages\.(\d+)\.blocks\.(\d+)\.(.*)$", key):
            rest = m[3].replace("mixer.", "op.", 1).replace("ls1.gamma", "gamma1").replace("ls2.gamma", "gamma2")
            if rest.startswith("mlp.fc") and rest.endswith(".weight"):
                value = value[:, :, None, None]
            out[f"layers.{m[1]}.{m[2]}.{rest}"] = value
        elif key.startswith("norm."):
            out["classifier.0." + key.removeprefix("norm.")] = value
        elif key.startswith("head.fc."):
            out["classifier.3." + key.removeprefix("head.fc.")] = value
        else:
            raise AssertionError(f"unmapped key {key}")
    return out


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of real digits: train/ and val/, 10 classes x 2 images each."""
    return digit_folder(tmp_path_factory.mktemp("digits"), per_split=2, img_size=64, class_name="digit{}")


@pytest.fixture(scope="module")
def run(digits: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real one-step vheat_micro run on the digit folders at the model's own 64 px."""
    out = tmp_path_factory.mktemp("formats") / "run"
    assert exit_code(["train", "--data", str(digits), "--output", str(out), "--img-size", "64", *FAST]) == 0
    return out


@pytest.fixture(scope="module")
def foreign(run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run's best model written in every foreign format."""
    root = tmp_path_factory.mktemp("foreign")
    model, meta, _ = load_classifier(run)
    state = model.state_dict()
    timm.models.save_for_hf(model, root / "hub", model_config={"label_names": meta["classes"]})
    args = argparse.Namespace(model="vheat_micro", img_size=None, input_size=None, mean=None, std=None, in_chans=None)
    torch.save({"epoch": 3, "arch": "vheat_micro", "state_dict": state, "args": args}, root / "model_best.pth.tar")
    authors = to_authors_layout(state, model.depths)
    torch.save({"model": authors, "epoch": 3, "max_accuracy": 50.0}, root / "vHeat_micro.pth")
    return {"run": run, "hub": root / "hub", "timm": root / "model_best.pth.tar", "authors": root / "vHeat_micro.pth"}


def test_the_authors_layout_helper_is_the_filters_inverse(run: Path) -> None:
    model, _, _ = load_classifier(run)
    state = model.state_dict()
    back = checkpoint_filter_fn(to_authors_layout(state, model.depths), model)
    assert set(back) == set(state)
    for key, value in state.items():
        torch.testing.assert_close(back[key], value, rtol=0, atol=0)


def test_run_best_is_a_timm_folder_with_its_class_names(run: Path) -> None:
    config = json.loads((run / "best" / "config.json").read_text())
    assert config["architecture"] == "vheat_micro" and config["num_classes"] == 10
    assert config["label_names"] == [f"digit{i}" for i in range(10)]
    cfg = config["pretrained_cfg"]
    assert cfg["input_size"] == [3, 64, 64] and cfg["crop_pct"] == 1.0 and len(cfg["mean"]) == 3
    assert not {"url", "hf_hub_id", "file"} & set(cfg)  # no source: loading never downloads
    recorded = json.loads((run / "config.json").read_text())  # timm's keys beside the run's settings (local-dir:RUN)
    assert {k: recorded[k] for k in config} == config and run_settings(recorded)["model"] == "vheat_micro"

    ours, meta, _ = load_classifier(run)
    theirs = timm.create_model(f"local-dir:{run / 'best'}", pretrained=True).eval()
    assert theirs.pretrained_cfg["label_names"] == meta["classes"]
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():  # the same plain code on the same weights: the same numbers, bit for bit
        torch.testing.assert_close(theirs(x), ours(x), rtol=0, atol=0)
        fresh = timm.create_model("vheat_micro", num_classes=10).eval()
        timm.models.load_checkpoint(fresh, str(run / "best" / "model.safetensors"))
        torch.testing.assert_close(fresh(x), ours(x), rtol=0, atol=0)
        # the commands' model, on the CPU kernels (channels-last stems, oneDNN products): float32 rounding only
        fused, _, _ = load_classifier(run, fused_kernels=True)
        torch.testing.assert_close(theirs(x), fused(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["run", "hub", "timm", "authors"])
def test_every_format_evaluates_like_the_run(fmt: str, foreign: dict[str, Path], digits: Path) -> None:
    path = foreign[fmt]
    assert checkpoint_format(path) == ("pdevision" if fmt == "run" else fmt)
    expected = evaluate_checkpoint(foreign["run"], data=str(digits), device="cpu")
    result = evaluate_checkpoint(path, data=str(digits), device="cpu")
    assert result["model"] == "vheat_micro"
    assert result["classes"] == expected["classes"]
    assert result["top1"] == expected["top1"] and result["loss"] == pytest.approx(expected["loss"], rel=1e-6)


@pytest.mark.parametrize("fmt", ["hub", "timm", "authors"])
def test_eval_command_takes_every_format(
    fmt: str, foreign: dict[str, Path], digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    argv = ["eval", "--checkpoint", str(foreign[fmt]), "--data", str(digits), "--output", str(out)]
    assert exit_code(argv) == 0
    assert "vheat_micro on 20 images" in capsys.readouterr().out
    assert (out / "eval.json").is_file()


def test_predict_names_the_hub_folders_classes(foreign: dict[str, Path], digits: Path, capsys) -> None:
    image = next((digits / "val" / "digit3").iterdir())
    assert exit_code(["predict", "--checkpoint", str(foreign["hub"]), str(image)]) == 0
    assert "digit" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["hub", "timm", "authors"])
def test_init_from_loads_every_format_exactly(fmt: str, foreign: dict[str, Path]) -> None:
    reference, meta, _ = load_classifier(foreign["run"])
    model = create_model("vheat_micro", num_classes=10, img_size=64)
    load_into_model(model, foreign[fmt], "vheat_micro", meta["classes"])
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0)


def test_train_init_from_the_authors_file(foreign: dict[str, Path], digits: Path, tmp_path: Path) -> None:
    argv = ["train", "--data", str(digits), "--init-from", str(foreign["authors"]), "--output", str(tmp_path / "r")]
    assert exit_code([*argv, *FAST]) == 0


def test_a_file_of_another_model_is_refused(foreign: dict[str, Path]) -> None:
    with pytest.raises(CheckpointError, match="holds a 'vheat_micro' model, not 'hcnet_micro'"):
        load_into_model(create_model("hcnet_micro", num_classes=10), foreign["timm"], "hcnet_micro", None)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: p.write_bytes(b"not a checkpoint"), "cannot be read as a PyTorch file"),
        (lambda p: torch.save({"x": argparse.ArgumentParser}, p), "holds objects other than weights"),
        (lambda p: torch.save({"w": torch.zeros(3, 3)}, p), "none of the registered models"),
        (lambda p: torch.save([torch.zeros(1)], p), "not a dict of weights"),
    ],
)
def test_bad_files_are_one_line_exit_2(make, message: str, tmp_path: Path, digits: Path, capsys) -> None:
    path = tmp_path / "weights.pth"
    make(path)
    assert exit_code(["eval", "--checkpoint", str(path), "--data", str(digits)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_folder_of_nothing_names_the_formats(tmp_path: Path, capsys) -> None:
    assert exit_code(["eval", "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.safetensors" in err and len(err.splitlines()) == 1


def test_pretrained_refuses_a_model_without_released_weights(digits: Path, tmp_path: Path, capsys) -> None:
    argv = ["train", "--model", "hcnet_micro", "--pretrained", "--data", str(digits), "--output", str(tmp_path / "r")]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "hcnet_micro has no released weights" in err and "vheat_tiny.in1k" in err
    assert not (tmp_path / "r").exists()
