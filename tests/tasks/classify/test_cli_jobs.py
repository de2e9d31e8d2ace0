"""`pdevision train / eval / predict` end to end, torchrun with 2 CPU processes, and user errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from pdevision.cli import main
from tests.helpers import count_calls

FAST = ["--img-size", "32", "--batch-size", "32", "--max-train-batches", "3", "--no-progress"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--epochs", "2", "--output", str(out), *FAST]) == 0
    return out


def test_eval_reports_metrics_and_confusion_png(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--checkpoint", str(run_dir), "--model", "vheat_micro"]) == 0
    out = capsys.readouterr().out
    assert "top-1" in out and "top-5" in out and "img/s" in out and "per-class top-1: 0 " in out
    result = json.loads((run_dir / "eval-best" / "eval.json").read_text())
    assert result["images"] == 360 and len(result["confusion_matrix"]) == 10
    assert sum(map(sum, result["confusion_matrix"])) == 360
    assert (run_dir / "eval-best" / "confusion_matrix.png").stat().st_size > 1000


def test_predict_prints_class_names(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _digit_png(tmp_path)
    assert main(["predict", "--checkpoint", str(run_dir / "best"), "--topk", "10", str(path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: ")  # one line per image


def _digit_png(folder: Path) -> Path:
    from pdevision.data import DigitsDataset

    img, _ = DigitsDataset("val")[0]
    path = folder / "digit.png"
    img.save(path)
    return path


def test_predict_json_is_the_whole_of_stdout(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _digit_png(tmp_path)
    assert main(["predict", "--checkpoint", str(run_dir / "best"), "--topk", "10", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    result = [json.loads(line) for line in captured.out.splitlines()]  # nothing but JSON Lines on stdout
    assert [r["image"] for r in result] == [str(path)]
    names, probs = zip(*result[0]["top"], strict=True)
    assert sorted(names) == [str(i) for i in range(10)]
    assert sum(probs) == pytest.approx(1.0, abs=1e-5) and list(probs) == sorted(probs, reverse=True)


def test_predict_json_pipes_into_json_tool(run_dir: Path, tmp_path: Path) -> None:
    """`pdevision predict --json ... | python -m json.tool --json-lines`, as a user runs it."""
    path = _digit_png(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    cmd = [
        sys.executable,
        "-m",
        "pdevision.cli",
        "predict",
        "--checkpoint",
        str(run_dir),
        "--json",
        str(path),
        str(path),
    ]
    predicted = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    tool = subprocess.run(
        [sys.executable, "-m", "json.tool", "--json-lines", "--compact"],
        input=predicted.stdout,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [json.loads(line)["image"] for line in tool.stdout.splitlines()] == [str(path), str(path)]
    assert predicted.stderr == ""  # no progress bar off a terminal, no other line


def test_predict_json_out_writes_a_new_file_and_never_overwrites(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, out = _digit_png(tmp_path), tmp_path / "pred.json"
    assert main(["predict", "--checkpoint", str(run_dir), "--topk", "3", "--json-out", str(out), str(path)]) == 0
    assert f"JSON written to {out}" in capsys.readouterr().out
    result = json.loads(out.read_text())["results"]
    assert result[0]["image"] == str(path) and len(result[0]["top"]) == 3
    before = out.read_bytes()
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--checkpoint", str(run_dir), "--json-out", str(out), str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "exists (it is not overwritten" in err[0], err
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--checkpoint", "{run}", "--output", "{tmp}/eval"],
        ["predict", "--checkpoint", "{run}/best", "{png}"],
        ["predict", "--checkpoint", "{tmp}/other", "--checkpoint", "{run}", "{png}"],  # the last, as the parser keeps
    ],
)
def test_eval_and_predict_read_the_checkpoint_once(
    argv: list[str], run_dir: Path, tmp_path: Path, digit_png: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line reads the --checkpoint's metadata before parsing (its kind chooses the task's flags); the
    task's eval and predict take it from there: the metadata is read once, the weights once."""
    from pdevision.engine import checkpoint

    metadata = count_calls(monkeypatch, checkpoint, "read_meta")
    header = count_calls(monkeypatch, checkpoint, "parse_checkpoint_metadata")  # the safetensors metadata it parses
    weights = count_calls(monkeypatch, checkpoint, "load_weights")
    assert main([a.format(run=run_dir, tmp=tmp_path, png=digit_png) for a in argv]) == 0
    assert (len(metadata), len(header), len(weights)) == (1, 1, 1)
    assert Path(metadata[0][0]).resolve() in (run_dir.resolve(), (run_dir / "best").resolve())


def test_predict_in_python_reads_the_metadata_itself_once(
    run_dir: Path, digit_png: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pdevision.engine import checkpoint
    from pdevision.tasks.classify import predict_images

    metadata = count_calls(monkeypatch, checkpoint, "read_meta")
    (result,) = predict_images(run_dir, [digit_png], topk=1, device="cpu")  # no metadata given: the loader reads it
    assert len(metadata) == 1 and result["image"] == str(digit_png)


def test_eval_with_wrong_model_is_a_clear_error(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--checkpoint", str(run_dir), "--model", "resnet18"]) == 2
    assert "holds a 'vheat_micro' model, not 'resnet18'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--data", "/no/such/folder"], "does not exist"),
        (["train", "--model", "vheat_tny"], "did you mean vheat_tiny"),
        (["train", "--img-size", "16"], "below the model's minimum of 32"),
        (["eval", "--checkpoint", "/no/such/ckpt"], "no checkpoint at"),
        (["predict", "--checkpoint", "/no/such/ckpt", "x.png"], "no checkpoint at"),
    ],
)
def test_user_errors_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("argv", [["train", "--batch-size", "0"], ["train", "--batch-size", "-3"]])
def test_bad_batch_size_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be a positive integer" in err[0]


def test_empty_folder_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["train", "--data", str(tmp_path / "empty")]) == 2
    assert "no class sub-folders" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "pdevision.cli",
        "train",
        "--epochs",
        "1",
        "--output",
        str(out),
        "--device",
        "cpu",
        *FAST,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_identical"] is True
    assert proc.stdout.count("best val top-1") == 1  # reported once, by rank 0
    assert proc.stderr.count("epoch 1/1  train loss") == 1
    assert summary["train_images"] == 1437


def test_image_modes_in_a_folder_train(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for c in ("x", "y"):
        (root / c).mkdir(parents=True)
        for i in range(4):
            img = Image.new("L" if i % 2 else "RGBA", (36, 36), color=60 * i if i % 2 else (9, 9, 9, 9))
            img.save(root / c / f"{i}.png")
    (root / "x" / "bad.png").write_bytes(b"\x89PNG broken")
    out = tmp_path / "run"
    argv = ["train", "--data", str(root), "--epochs", "1", "--output", str(out), "--val-split", "0.5", *FAST]
    assert main(argv) == 0
    assert len(json.loads((out / "summary.json").read_text())["skipped_images"]) == 1
