"""Issue 16 through the command line: crafted checkpoints never reach the network (defect 3), corrupt
checkpoints (8), decompression bombs (9), evaluation output beside the checkpoint (11), one-line errors
and per-image prediction reports (12)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import timm
from PIL import Image

from pdevision.cli import main
from pdevision.data import DigitsDataset
from pdevision.engine.checkpoint import read_meta
from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from tests.helpers import digit_folder

CLASSES = [str(i) for i in range(10)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with a real (untrained) vheat_micro checkpoint for the digits at 32 px."""
    out = tmp_path_factory.mktemp("hardening") / "run"
    model = create_model("vheat_micro", num_classes=10, img_size=32)
    cfg = timm.data.resolve_data_config({}, model=model)
    meta = {
        "model": "vheat_micro",
        "classes": CLASSES,
        "img_size": 32,
        "model_args": {"img_size": 32},
        "mean": list(cfg["mean"]),
        "std": list(cfg["std"]),
    }
    save_checkpoint(out, "best", model, meta)
    save_checkpoint(out, "last", model, {**meta, "epoch": 1}, {"epoch": 0})
    return out


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ImageFolder of real digits: train/ and val/, 10 classes x 1 image each."""
    return digit_folder(tmp_path_factory.mktemp("digits"), per_split=1, img_size=32)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _crafted(run: Path, tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "crafted"
    shutil.copytree(run / "best", folder)
    meta = {**read_meta(folder), **changes}
    weights = safetensors.torch.load_file(str(folder / "model.safetensors"))
    safetensors.torch.save_file(
        weights, str(folder / "model.safetensors"), metadata={k: json.dumps(v) for k, v in meta.items()}
    )
    return folder


@pytest.mark.parametrize(
    "changes",
    [
        {
            "model_args": {
                "img_size": 32,
                "pretrained": True,
                "pretrained_cfg_overlay": {"url": "http://10.0.0.1/w.pth"},
            }
        },
        {"model_args": {"img_size": 32, "pretrained_cfg": {"hf_hub_id": "someone/weights"}}},
        {"model_args": {"img_size": 32, "checkpoint_path": "/elsewhere/weights.pth"}},
        {"model_args": {"img_size": 32, "act_layer": "https://10.0.0.1/code"}},
        {"model": "hf-hub:someone/weights"},
        {"model_args": {"img_size": 32, "not_an_argument_of_vheat": 3}},
    ],
)
@pytest.mark.parametrize("command", ["predict", "eval"])
def test_crafted_checkpoint_metadata_is_refused_without_network(
    run: Path, tmp_path: Path, digit_png: Path, no_network: list, capsys, changes: dict, command: str
) -> None:
    folder = _crafted(run, tmp_path, **changes)
    argv = ["predict", "--checkpoint", str(folder), str(digit_png)] if command == "predict" else []
    argv = argv or ["eval", "--checkpoint", str(folder), "--output", str(tmp_path / "ev")]
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "refused" in line or "not a registered model name" in line
    assert no_network == []


def test_eval_and_predict_of_a_checkpoint_open_no_connection(
    run: Path, tmp_path: Path, digit_png: Path, digits: Path, no_network: list, capsys
) -> None:
    assert main(["predict", "--checkpoint", str(run), str(digit_png)]) == 0
    assert main(["eval", "--checkpoint", str(run), "--output", str(tmp_path / "ev"), "--data", str(digits)]) == 0
    assert no_network == []


def test_eval_writes_beside_the_checkpoint_not_into_it(run: Path, digits: Path, capsys) -> None:
    assert main(["eval", "--checkpoint", str(run), "--data", str(digits)]) == 0
    assert not (run / "best" / "eval").exists()
    result = json.loads((run / "eval-best" / "eval.json").read_text())
    assert result["images"] == 10 and (run / "eval-best" / "confusion_matrix.png").is_file()
    assert str(run / "eval-best") in capsys.readouterr().out
    model = create_model("vheat_micro", num_classes=10, img_size=32)
    save_checkpoint(run, "best", model, read_meta(run / "best"))  # the next save of best/
    assert (run / "eval-best" / "eval.json").is_file()


def test_predict_reads_a_folder_and_reports_each_image(run: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    ds = DigitsDataset("val", img_size=32)
    for i in range(3):
        ds[i][0].save(folder / f"{i}.png")
    (folder / "notes.txt").write_text("not an image")
    assert main(["predict", "--checkpoint", str(run), "--topk", "2", str(folder)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == [str(folder / f"{i}.png") for i in range(3)]


def test_predict_good_and_bad_images_reports_each_and_fails_at_the_end(
    run: Path, tmp_path: Path, digit_png: Path, capsys
) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    missing = tmp_path / "missing.png"
    assert main(["predict", "--checkpoint", str(run), str(digit_png), str(bad), str(missing)]) == 3
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{digit_png}: ") and "FAILED" not in lines[0]
    err = captured.err.strip().splitlines()
    assert err[0].startswith(f"{bad}: FAILED: cannot read image")
    assert err[1].startswith(f"{missing}: FAILED: image {missing} does not exist")
    assert err[2] == "pdevision predict: 2 of 3 images could not be read" and len(err) == 3
    # with --json, stdout is still JSON alone (a line per image, the failures among them); the lines of the failures
    # and the count stay on stderr
    assert main(["predict", "--checkpoint", str(run), str(digit_png), str(bad), str(missing), "--json"]) == 3
    captured = capsys.readouterr()
    assert [("error" in json.loads(line)) for line in captured.out.splitlines()] == [False, True, True]
    assert "2 of 3 images could not be read" in captured.err.strip().splitlines()[-1]


def test_decompression_bomb_to_predict_is_one_line(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bomb = tmp_path / "bomb.png"
    Image.new("L", (64, 64)).save(bomb)  # 4,096 pixels, over twice the limit set below
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    assert main(["predict", "--checkpoint", str(run), str(bomb)]) == 3
    captured = capsys.readouterr()
    (line, count) = captured.err.strip().splitlines()
    assert "too large to decode safely" in line and "decompression bomb" in line.lower() and "Traceback" not in line
    assert count == "pdevision predict: 1 of 1 images could not be read"


@pytest.mark.parametrize(("file", "command"), [("model.safetensors", "eval"), ("trainer.pt", "train")])
def test_corrupt_checkpoint_is_one_line_exit_2(run: Path, tmp_path: Path, file: str, command: str, capsys) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    name = "best" if command == "eval" else "last"
    path = copy / name / file
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    if command == "eval":
        argv = ["eval", "--checkpoint", str(copy)]
    else:
        argv = ["train", "--resume", str(copy), "--output", str(tmp_path / "out"), "--img-size", "32", "--no-progress"]
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(path) in line and "corrupt or truncated" in line


def test_no_verify_images_skips_unreadable_files_at_load_time(tmp_path: Path, capsys) -> None:
    root = tmp_path / "data"
    for c in ("x", "y"):
        (root / c).mkdir(parents=True)
        for i in range(4):
            Image.new("L", (36, 36), 50 * i).save(root / c / f"{i}.png")
        (root / c / "broken.png").write_bytes(b"\x89PNG broken")
    argv = ["train", "--data", str(root), "--epochs", "1", "--output", str(tmp_path / "run"), "--val-split", "0.5"]
    argv += ["--img-size", "32", "--batch-size", "4", "--no-progress", "--no-verify-images"]
    assert main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err


def _parse_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--drop-path", "2"], "--drop-path: must be a number in [0, 1) (a probability), got '2'"),
        (["train", "--warmup-epochs", "-5"], "--warmup-epochs: must be an integer in [0, 100000]"),
        (["train", "--lr", "nan"], "--lr: must be a finite number"),
        (["pretrain", "--mask-ratio", "1"], "--mask-ratio: must be a number in (0.0, 1.0)"),
        (["train", "--device", "tpu"], "unknown device 'tpu'"),
        (["train", "--device", "meta"], "unsupported device 'meta'"),
        (["train", "--device", "cuda:x"], "unknown device 'cuda:x'"),
    ],
)
def test_bad_values_are_refused_in_one_line(argv: list[str], message: str, capsys) -> None:
    assert message in _parse_error(argv, capsys)


def test_device_cuda_without_a_gpu(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert "CUDA is not available on this machine" in _parse_error(["train", "--device", "cuda"], capsys)


@pytest.mark.parametrize("command", ["train", "pretrain", "eval"])
def test_output_naming_an_existing_file(tmp_path: Path, command: str, capsys) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    extra = ["--checkpoint", str(tmp_path)] if command == "eval" else []
    assert "exists and is not a folder" in _parse_error([command, *extra, "--output", str(file)], capsys)


def test_a_refused_resume_leaves_the_run_folder_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Resuming an AdamW run with --opt sgd failed at the first step with a bare KeyError ('momentum'), and a run
    refused for its --amp had already rewritten the folder's config.json."""
    out = tmp_path / "run"
    base = ["train", "--model", "vheat_micro", "--epochs", "3", "--img-size", "32", "--batch-size", "16"]
    base += ["--max-train-batches", "2", "--no-progress", "--output", str(out)]
    assert main([*base, "--stop-after-epochs", "1"]) == 0
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and "tensorboard" not in p.parts}
    capsys.readouterr()
    assert main([*base, "--resume", str(out), "--opt", "sgd"]) == 2
    err = capsys.readouterr().err
    assert "--opt sgd differs from the run's adamw" in err and err.count("\n") == 1  # its recorded settings
    assert main([*base, "--resume", str(out), "--amp", "fp16"]) == 2
    assert "--amp fp16 needs a CUDA device" in capsys.readouterr().err
    after = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and "tensorboard" not in p.parts}
    assert after == before


def test_a_new_run_does_not_replace_a_run_folder_unasked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second run into the same --output replaced the first one's checkpoints file by file, without a word."""
    out = tmp_path / "run"
    base = ["train", "--model", "vheat_micro", "--epochs", "2", "--img-size", "32", "--batch-size", "16"]
    base += ["--max-train-batches", "1", "--no-progress", "--output", str(out)]
    assert main([*base, "--stop-after-epochs", "1"]) == 0
    weights = (out / "best" / "model.safetensors").read_bytes()
    capsys.readouterr()
    for argv in (
        ["train", "--model", "pderesnet_micro", *base[3:]],
        [
            "pretrain",
            "--epochs",
            "1",
            "--crops-per-epoch",
            "16",
            "--batch-size",
            "16",
            "--no-progress",
            "--output",
            str(out),
        ],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{out} already holds a run (last, best, config.json, summary.json)" in err
        assert f"--resume {out}" in err and "--overwrite" in err and err.count("\n") == 1
    assert (out / "best" / "model.safetensors").read_bytes() == weights
    assert main([*base, "--resume", str(out)]) == 0  # continuing it is what --resume is for
    assert main([*base, "--overwrite", "--seed", "1"]) == 0  # and starting over, when asked
    assert json.loads((out / "config.json").read_text())["seed"] == 1


def test_crafted_checkpoint_metadata_is_one_clear_error(
    run: Path, digit_png: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Edited metadata or a removed tensor: they gave a TypeError, a KeyError, a 2,000-character list of missing
    keys, or (an image size of 100,000) a hang."""
    weights = safetensors.torch.load_file(str(run / "best" / "model.safetensors"))
    meta = read_meta(run / "best")

    def craft(name: str, tensors: dict, **changes: object) -> Path:
        folder = tmp_path / name / "best"
        folder.mkdir(parents=True)
        metadata = {k: json.dumps(v) for k, v in {**meta, **changes}.items()}
        safetensors.torch.save_file(tensors, str(folder / "model.safetensors"), metadata=metadata)
        return folder

    fewer = {k: v for k, v in weights.items() if k != "head.fc.weight"}
    cases = [
        (craft("classes", weights, classes=5), "its classes must be a list of names, got 5"),
        (craft("kind", weights, kind="segment"), "is a segment checkpoint without its head"),
        (craft("missing", fewer), r"does not fit vheat_micro: 1 weights missing ['head.fc.weight']"),
        (craft("huge", weights, img_size=100000, model_args={}), "is not an integer from 1 to 16384"),
        (  # each width within its bound, 480 billion parameters together: counted before anything is allocated
            craft("wide", weights, model_args={**meta.get("model_args", {}), "dims": 16384}),
            "vheat_micro with dims=16384 would have 479.6 billion parameters, above the limit of 1 billion",
        ),
    ]
    for folder, expected in cases:
        assert main(["predict", "--checkpoint", str(folder), str(digit_png)]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1 and len(err) < 600, err


def test_predict_of_a_folder_counts_the_entries_it_skips(
    run: Path, digit_png: Path, tmp_path: Path, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    """``predict FOLDER`` dropped a FIFO and a dangling link named ``*.png`` with no line and no count (issue 37)."""
    folder = tmp_path / "images"
    folder.mkdir()
    shutil.copy(digit_png, folder / "a.png")
    os.mkfifo(folder / "fifo.png")
    (folder / "gone.png").symlink_to(tmp_path / "missing.png")
    assert main(["predict", "--checkpoint", str(run), str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "a.png" in out and "fifo.png" not in out and "gone.png" not in out and "Traceback" not in err
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(
        f"skipped 2 entries of {folder} named like images that are not image files" in w and "fifo.png, gone.png" in w
        for w in warnings
    ), warnings
