"""Input-side hardening across every command and task: size and count flags are bounded alike, special files
never block, and bad input is one line naming the problem (exit 2)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import timm
from PIL import Image

from pdevision.cli import build_parser, main
from pdevision.data import DataError
from pdevision.data.dense import CocoDetection, MaskFolder
from pdevision.data.imageio import open_rgb
from pdevision.data.shards import shard_datasets, write_shards
from pdevision.engine.checkpoint import CheckpointError, load_trainer_state, load_weights, read_meta
from pdevision.engine.save import save_checkpoint
from pdevision.models.dense import pretrained_overlay
from pdevision.tasks import tasks
from pdevision.tasks.classify.robustness import evaluate_corruptions
from pdevision.viz.common import load_image_files, run_data
from tests.test_cli_fuzz import _subparsers

HUGE = str(10**12)  # a typo's worth of zeros: asks for hours of work or terabytes of memory


def _integer_options() -> dict[tuple[str, str], argparse.Action]:
    """Every integer option of every (sub)command, with ``train`` / ``eval`` / ``predict`` once per task."""
    found: dict[tuple[str, str], argparse.Action] = {}
    for name in tasks():
        for words, sub in _subparsers(build_parser(name, name)).items():
            label = f"{words}[{name}]" if words in ("train", "eval", "predict") else words
            for action in sub._actions:
                if getattr(action.type, "__name__", "") in ("int", "_positive_int"):
                    found[(label, action.option_strings[0] if action.option_strings else action.dest)] = action
    return found


def test_every_integer_flag_of_every_command_is_bounded() -> None:
    unbounded = []
    for (words, flag), action in sorted(_integer_options().items()):
        if flag == "--batch-size" and words.startswith(("train", "pretrain")):
            continue  # the run's batch size: bounded with the learning-rate scaling it drives (run-state side)
        for value in (HUGE, "-1"):
            try:
                action.type(value)
            except argparse.ArgumentTypeError:
                continue
            unbounded.append(f"{words} {flag} {value}")
    assert not unbounded, unbounded


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--task", "segment", "--train-scenes", HUGE],
        ["train", "--task", "detect", "--val-scenes", HUGE],
        ["train", "--task", "denoise", "--patches-per-epoch", HUGE],
        ["pretrain", "--crops-per-epoch", HUGE],
        ["train", "--shuffle-buffer", HUGE],
        ["train", "--epochs", HUGE],
        ["train", "--warmup-epochs", HUGE],
        ["viz", "erf", "--img-size", HUGE],
        ["viz", "heat", "--model", "vheat_micro", "--img-size", HUGE],
        ["viz", "heat", "--model", "vheat_micro", "--img-size", "16384"],  # sweep: ran past four minutes
        ["viz", "erf", "--models", "vheat_micro", "--img-size", "4096"],
        ["viz", "symmetry", "--checkpoint", "x", "--seed", "-1"],
        ["bench", "--batch", HUGE],
        ["restore", "--checkpoint", "x", "in.png", "out.png", "--tile", HUGE],
        ["restore", "--checkpoint", "x", "in.png", "out.png", "--overlap", HUGE],
    ],
)
def test_huge_sizes_are_refused_when_parsed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be an integer in" in err, err


@pytest.mark.parametrize("data", ["digits", "scenes"])
def test_image_sizes_the_embedded_sets_cannot_use_are_one_line(
    data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """16384 px passed the flag's bound: the digits ended in Pillow's DecompressionBombError from the library's
    own resize, the scenes asked for 4 TB of generated images."""
    argv = ["train", "--data", data, "--img-size", "16384", "--output", str(tmp_path / "run"), "--epochs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "image size 16384" in err and "at most" in err and "--img-size" in err, err
    assert "Decompression" not in err


# -- special files where a regular file is expected: refused, never waited on ------------------------------------


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _checkpoint(run: Path) -> Path:
    model = timm.create_model("vheat_micro", num_classes=3, img_size=32)
    meta = {"model": "vheat_micro", "classes": ["a", "b", "c"], "img_size": 32, "epoch": 1, "kind": "classify"}
    return save_checkpoint(run, "last", model, meta, {"epoch": 1})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["model.safetensors", "trainer.pt"])
def test_a_fifo_checkpoint_file_is_refused(name: str, tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "run")
    (folder / name).unlink()
    _fifo(folder / name)
    with pytest.raises(CheckpointError, match="is a FIFO, not a regular file"):
        read_meta(folder) if name == "model.safetensors" else load_trainer_state(folder)
    if name == "model.safetensors":
        with pytest.raises(CheckpointError, match="is a FIFO"):
            load_weights(folder)


@pytest.mark.timeout(60)
def test_eval_of_a_fifo_checkpoint_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _checkpoint(tmp_path / "run")
    (folder / "model.safetensors").unlink()
    _fifo(folder / "model.safetensors")
    assert main(["eval", "--checkpoint", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "FIFO" in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("with_classes", [False, True])
def test_local_weights_file_that_is_a_fifo_is_refused(with_classes: bool, tmp_path: Path) -> None:
    """``num_classes`` in the overlay skipped the check and timm's loader opened the FIFO: blocked forever."""
    overlay = dict(file=str(_fifo(tmp_path / "w.safetensors")), **({"num_classes": 3} if with_classes else {}))
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        timm.create_model("vheat_micro", pretrained=True, pretrained_cfg_overlay=overlay)


@pytest.mark.timeout(60)
def test_dense_backbone_weights_that_are_a_fifo_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a FIFO"):
        pretrained_overlay(_fifo(tmp_path / "model.safetensors"))


@pytest.mark.timeout(60)
def test_a_fifo_corruptions_baseline_is_refused(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "run")
    with pytest.raises(ValueError, match=r"--baseline .* is a FIFO"):
        evaluate_corruptions(
            str(folder), ["gaussian_noise"], [1], "digits", 8, "cpu",
            baseline=str(_fifo(tmp_path / "corruptions.json")), output=str(tmp_path / "out"), max_images=4,
        )  # fmt: skip


@pytest.mark.timeout(60)
def test_fifo_coco_annotations_are_refused(tmp_path: Path) -> None:
    _fifo(tmp_path / "coco" / "annotations" / "instances_train.json")
    with pytest.raises(DataError, match="is a FIFO, not a regular file"):
        CocoDetection(tmp_path / "coco", "train")


@pytest.mark.timeout(60)
def test_fifo_classes_txt_of_a_mask_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "masks"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(3):
        Image.new("RGB", (16, 16)).save(root / "images" / f"{i}.png")
        Image.new("L", (16, 16)).save(root / "masks" / f"{i}.png")
    _fifo(root / "classes.txt")
    with pytest.raises(DataError, match="is a FIFO"):
        MaskFolder(root, "train")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["classes.txt", "train/b.tar"])
def test_fifo_in_a_shard_folder_is_refused(which: str, tmp_path: Path) -> None:
    """classes.txt was read and a FIFO named *.tar opened by tarfile: both blocked forever."""
    root = tmp_path / "shards"
    samples = [(Image.new("RGB", (8, 8), (i * 40, 0, 0)), i % 2) for i in range(4)]
    write_shards(samples, root / "train", per_shard=4)
    write_shards(samples, root / "val", per_shard=4)
    _fifo(root / which)
    with pytest.raises(DataError, match="is a FIFO"):
        shard_datasets(root, None, None)


@pytest.mark.timeout(60)
def test_viz_image_that_is_a_fifo_is_named_a_fifo(tmp_path: Path) -> None:
    """It used to read "does not exist"."""
    with pytest.raises(ValueError, match="FIFO") as exc:
        load_image_files([_fifo(tmp_path / "x.png")], lambda img: img)
    assert "does not exist" not in str(exc.value)


@pytest.mark.timeout(60)
def test_viz_report_skips_fifo_run_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = _checkpoint(run)
    _fifo(run / "config.json")
    assert run_data(folder) is None


# -- messages that name the problem, not an internal ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["restored", "restored.xyz", "restored.tmp"])
def test_restore_to_a_name_without_an_image_extension_is_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to name its temporary file (``.restored.tmp-PID``) in Pillow's "unknown file extension"."""
    src = tmp_path / "in.png"
    Image.new("L", (16, 16)).save(src)
    assert main(["restore", "--checkpoint", str(tmp_path / "no_ckpt"), str(src), str(tmp_path / name)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names no image format" in err and ".png" in err, err
    assert "tmp-" not in err


def test_bench_fp16_on_the_cpu_is_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to end in a oneDNN primitive error after the models were built."""
    argv = ["bench", "--dtype", "fp16", "--device", "cpu", "--models", "vheat_micro", "--out", str(tmp_path / "b")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--dtype fp16 needs a CUDA device" in err, err


def test_eval_of_a_class_folder_named_in_non_utf8_writes_the_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class folder whose name is not UTF-8 made matplotlib fail and left eval-best/ empty."""
    root = tmp_path / "data"
    names = [os.fsdecode(b"caf\xe9"), "plain"]
    for c, name in enumerate(names):
        for split in ("train", "val"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (32, 32), (200 * c, 50 * i, 0)).save(folder / f"{i}.png")
    model = timm.create_model("vheat_micro", num_classes=2, img_size=32)
    meta = {"model": "vheat_micro", "classes": sorted(names), "img_size": 32, "model_args": {"img_size": 32},
            "mean": [0.5] * 3, "std": [0.5] * 3, "epoch": 1, "kind": "classify"}  # fmt: skip
    folder = save_checkpoint(tmp_path / "run", "best", model, meta)
    assert main(["eval", "--checkpoint", str(folder), "--data", str(root), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "caf\\xe9" in out
    assert (tmp_path / "run" / "eval-best" / "confusion_matrix.png").stat().st_size > 0
    assert (tmp_path / "run" / "eval-best" / "eval.json").is_file()


@pytest.mark.parametrize("task", ["segment", "detect"])
def test_image_sizes_the_embedded_scenes_cannot_use_are_one_line(
    task: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sweep case: detect at 16384 px on the 64-px scenes built a backbone at that size and ran past four minutes."""
    argv = ["train", "--task", task, "--img-size", "16384", "--output", str(tmp_path / "run"), "--epochs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "image size 16384" in err and "at most 1024" in err, err


@pytest.mark.parametrize("data", [None, "digits"])
def test_pretrain_crops_larger_than_the_embedded_images_are_one_line(
    data: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sweep case: pretrain --img-size 16384 on the sample photos built a 1,008M-parameter encoder and ran on."""
    argv = ["pretrain", "--img-size", "16384", "--output", str(tmp_path / "run"), "--epochs", "1"]
    assert main(argv + (["--data", data] if data else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "image size 16384" in err and "at most" in err, err


def test_restore_onto_its_own_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Sweep case: ``restore IN IN`` replaced the user's original with the restored image, exit 0."""
    src = tmp_path / "in.png"
    Image.new("L", (16, 16), 7).save(src)
    before = src.read_bytes()
    assert main(["restore", "--checkpoint", str(tmp_path / "no_ckpt"), str(src), str(tmp_path / "." / "in.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is the input image" in err, err
    assert src.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"\xff\xfe{not json", "is not JSON"), (b"[1, 2]", "a JSON list"), (b'{"images": 4}', "no field")],
)
def test_a_corruptions_baseline_that_is_not_one_is_one_line_exit_2(
    content: bytes, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sweep case: a baseline JSON holding a list ended in ``TypeError: list indices must be integers``, exit 1."""
    folder = _checkpoint(tmp_path / "run")
    (tmp_path / "corruptions.json").write_bytes(content)
    argv = ["eval", "--checkpoint", str(folder), "--corruptions", "gaussian_noise", "--severities", "1"]
    assert main([*argv, "--baseline", str(tmp_path / "corruptions.json"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and why in err and "expected a corruptions.json" in err, err


def test_a_file_that_is_not_an_image_is_named_not_its_file_object(tmp_path: Path) -> None:
    """Sweep case: Pillow's "cannot identify image file <_io.BufferedReader name=3>" reached the user."""
    (tmp_path / "text.png").write_text("hello")
    with pytest.raises(ValueError, match="not an image format Pillow knows") as exc:
        open_rgb(tmp_path / "text.png")
    assert "BufferedReader" not in str(exc.value) and "text.png" in str(exc.value)
