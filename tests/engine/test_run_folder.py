"""Issue 24, run folders, checkpoints and run state, for every task (they share the loop): a new run never
overwrites files it did not write, no command writes inside a checkpoint folder, a batch larger than the training
set, a checkpoint further along than --epochs and a crafted trainer.pt are refused, non-finite weights are refused
on every load path, and a full disk is one line naming the folder with the last checkpoint intact."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from PIL import Image

import pdevision.engine.save as save_module
from pdevision.cli import main
from pdevision.engine.checkpoint import load_weights, read_meta
from tests.data.test_dense_data import _coco, _write_mask_folder

TINY_IR = {"embed_dim": 8, "depths": [1]}
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _argv(task: str, data: Path, out: Path) -> list[str]:
    """A tiny two-epoch training run of ``task`` into ``out``."""
    args = {
        "classify": "train --model vheat_micro --img-size 32 --batch-size 16 --max-train-batches 1",
        "segment": "train --task segment --head fpn --model pderesnet_micro --data {data}/masks --img-size 32 "
        "--batch-size 2",
        "detect": "train --task detect --head faster_rcnn --model pderesnet_micro --data {data}/coco --img-size 64 "
        "--batch-size 2",
        "denoise": "train --task denoise --data {data}/photos --patch-size 16 --model-args TINY "
        "--patches-per-epoch 8 --batch-size 4 --baselines noisy",
        "pretrain": "pretrain --crops-per-epoch 16 --batch-size 16",
    }[task].split()
    args = [json.dumps(TINY_IR) if a == "TINY" else a.format(data=data) for a in args]
    return [*args, "--epochs", "2", "--no-progress", "--output", str(out)]


TASKS = ("classify", "segment", "detect", "denoise", "pretrain")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    _write_mask_folder(root / "masks", n=6, size=(40, 48))
    _coco(root / "coco", "train")
    _coco(root / "coco", "val")
    (root / "photos" / "train").mkdir(parents=True)
    (root / "photos" / "test").mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 2), ("test", 1)):
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(
                root / "photos" / split / f"{i}.png"
            )
    Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8)).save(root / "photo.png")
    return root


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished two-epoch run of every task."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for task in TASKS:
        assert main(_argv(task, data, root / task)) == 0, task
        out[task] = root / task
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / run.name
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _exit_code(argv: list[str]) -> int:
    """``main``'s exit code, also where the parser exits (SystemExit)."""
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:
        return int(exc.code or 0)


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- 1a: a new run never overwrites files it did not write -------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_a_new_run_refuses_a_folder_of_other_files(
    task: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --output DIR`` overwrote the user's DIR/metrics.csv (a folder counted as a run folder only with
    last/, best/, config.json or summary.json in it)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.csv").write_text("my own numbers\n")
    (out / "notes.txt").write_text("my notes\n")
    (out / "tensorboard").mkdir()
    (out / "tensorboard" / "events.mine").write_text("x")
    before = _files(out)
    assert _exit_code(_argv(task, data, out)) == 2
    line = _one_line(capsys)
    assert "holds files that are not a run's" in line and "metrics.csv" in line and "another --output" in line
    # --overwrite starts over a run, never the user's files: a name the run writes is still refused
    assert _exit_code([*_argv(task, data, out), "--overwrite"]) == 2
    assert "a run would overwrite them" in _one_line(capsys)
    assert _files(out) == before and sorted(p.name for p in out.iterdir()) == [
        "metrics.csv",
        "notes.txt",
        "tensorboard",
    ]


def test_overwrite_writes_beside_other_files_and_leaves_them(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    (out / "figures").mkdir()
    (out / "figures" / "a.png").write_bytes(b"png")
    assert _exit_code(_argv("classify", data, out)) == 2
    line = _one_line(capsys)
    assert "figures, notes.txt" in line and "--overwrite to write the run beside them" in line
    assert _exit_code([*_argv("classify", data, out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "my notes\n" and (out / "figures" / "a.png").read_bytes() == b"png"
    assert (out / "last" / "model.safetensors").is_file()
    # a run's folder with the user's notes beside it: --overwrite starts the run over, the notes stay
    assert _exit_code([*_argv("classify", data, out), "--overwrite", "--seed", "1"]) == 0
    assert (out / "notes.txt").read_text() == "my notes\n"


def test_many_other_files_are_counted(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    for i in range(7):
        (out / f"f{i}.txt").write_text("x")
    assert _exit_code(_argv("classify", data, out)) == 2
    assert "(f0.txt, f1.txt, f2.txt and 4 more)" in _one_line(capsys)


# -- 1b: no command writes inside a checkpoint folder ------------------------------------------------------------


def _inside_cases(runs: dict[str, Path], data: Path) -> list[list[str]]:
    clf, seg, den, enc = runs["classify"], runs["segment"], runs["denoise"], runs["pretrain"]
    photo = data / "photo.png"
    return [
        ["eval", "--checkpoint", clf, "--output", clf / "best" / "ev"],
        ["eval", "--checkpoint", clf, "--output", clf / "last"],
        ["eval", "--checkpoint", clf, "--output", clf / ".best.old" / "ev"],
        ["eval", "--checkpoint", clf, "--output", clf / ".last.tmp-1-ab" / "ev"],
        ["eval", "--checkpoint", enc / "encoder", "--output", enc / "encoder" / "knn"],
        ["predict", "--checkpoint", seg, photo, "--output", seg / "best" / "pred"],
        ["predict", "--checkpoint", runs["detect"], photo, "--output", runs["detect"] / "last" / "pred"],
        ["viz", "gradcam", "--checkpoint", clf, "--output", clf / "best" / "cam"],
        ["viz", "erf", "--models", "vheat_micro", "--output", clf / "last" / "erf"],
        ["bench", "--models", "vheat_micro", "--out", clf / "best" / "bench"],
        ["restore", "--checkpoint", den / "best", photo, den / "best" / "restored.png"],
        ["train", "--output", enc / "encoder" / "run"],
        # a folder named best/ of a run folder that has none yet: the run's first save would replace it
        ["eval", "--checkpoint", clf, "--output", enc / "best"],
    ]


def test_no_command_writes_inside_a_checkpoint_folder(
    runs: dict[str, Path], data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval --output RUN/best/ev`` was accepted, and the next save of best/ deleted ev/."""
    before = {name: _files(run) for name, run in runs.items()}
    for argv in _inside_cases(runs, data):
        assert _exit_code(argv) == 2, argv
        line = _one_line(capsys)
        assert "inside the checkpoint folder" in line and "write beside it" in line, line
    assert {name: _files(run) for name, run in runs.items()} == before


# -- 2a: a batch larger than the training set --------------------------------------------------------------------


@pytest.mark.parametrize("task", ["classify", "segment", "detect", "denoise"])
def test_a_batch_larger_than_the_training_set_is_clamped_and_said(
    task: str, data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``--batch-size 1000000000`` made one short batch and scaled the learning rate by the nominal batch (lr 156),
    exit 0 and a checkpoint saved, without a word. Now the batch is the training set's size, said in a warning, and
    the learning rate follows it."""
    out = tmp_path / "run"
    argv = [*_argv(task, data, out), "--batch-size", "1000000000", "--epochs", "1"]
    assert _exit_code(argv) == 0
    config = json.loads((out / "config.json").read_text())
    samples = json.loads((out / "summary.json").read_text())["train_samples"]
    assert config["batch_size"] == samples < 1000000000
    warned = [r.getMessage() for r in caplog.records if "larger than the training set" in r.getMessage()]
    said = f"batch size 1000000000 is larger than the training set ({samples} samples); using batches of {samples}"
    assert len(warned) == 1 and warned[0].startswith(said)
    if config["lr"] is None:  # the recipe's rate, scaled by the batch the loader really makes
        assert warned[0].endswith("(the learning rate is scaled by that batch)")
        peak = config["lr_base"] * samples / config["lr_base_batch"]
        assert all(row["lr"] <= peak * (1 + 1e-6) for row in _metrics(out))


def test_a_pretraining_batch_larger_than_its_crops_is_refused(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pretraining draws its crops per epoch: a batch larger than them is refused by the task, in one line."""
    assert _exit_code([*_argv("pretrain", data, tmp_path / "run"), "--batch-size", "1000000000"]) == 2
    assert "16 crops per epoch do not fill one global batch of 1000000000" in _one_line(capsys)


def _metrics(run: Path) -> list[dict]:
    import csv

    with open(run / "metrics.csv") as f:
        return [{k: float(v) for k, v in row.items() if v and k == "lr"} for row in csv.DictReader(f)]


# -- 2b: resume state ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_resume_with_fewer_epochs_than_the_checkpoint_is_refused(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs[task], tmp_path)
    before = _files(run)
    argv = _argv(task, data, run)
    argv[argv.index("--epochs") + 1] = "1"
    assert _exit_code([*argv, "--resume", run]) == 2
    line = _one_line(capsys)
    assert "has finished 2 epochs, more than this run's 1" in line and "--epochs 2 or more" in line
    assert _files(run) == before


def _trainer(run: Path) -> dict:
    return torch.load(run / "last" / "trainer.pt", weights_only=True)


def _crafted_states(state: dict) -> list[tuple[object, str]]:
    def without(key: str) -> dict:
        return {k: v for k, v in state.items() if k != key}

    return [
        ({}, "'optimizer' is missing"),
        (without("optimizer"), "'optimizer' is missing"),
        (without("rng"), "'rng' is missing"),
        ({**state, "sampler_epoch": 10**12}, "'sampler_epoch' must be an integer from 0 to"),
        ({**state, "sampler_epoch": -3}, "'sampler_epoch' must be an integer from 0 to"),
        ({**state, "sampler_epoch": "2"}, "'sampler_epoch' must be an integer"),
        ({**state, "num_updates": "12x"}, "'num_updates' must be an integer"),
        ({**state, "num_updates": 1.5}, "'num_updates' must be an integer"),
        ({**state, "elapsed": float("nan")}, "'elapsed' must be a finite number"),
        ({**state, "best": "high"}, "'best' must be a finite number or None"),
        ({**state, "history": "rows"}, "'history' must be a list"),
        ({**state, "history": [{"epoch": "one"}]}, "'history' row 1 is not a metric row"),
        (
            {**state, "history": [*state["history"], {"epoch": 2, 3: 4}]},
            f"'history' row {len(state['history']) + 1} is not a metric row",
        ),
        ({**state, "history": [{"epoch": 1, "loss": [1, 2]}]}, "'history' row 1 is not a metric row"),
        ({**state, "rng": []}, "'rng' must be a non-empty list"),
        ({**state, "optimizer": [1, 2]}, "'optimizer' is a list, not a dict"),
        ({**state, "optimizer": {"state": {}}}, "'optimizer' has no parameter groups"),
        ({**state, "scaler": None}, "'scaler' is a NoneType, not a dict"),
        ({**state, "scheduler": {**state["scheduler"], "t_initial": "x"}}, "'scheduler' has t_initial = 'x'"),
        ({**state, "scheduler": {**state["scheduler"], "base_values": [float("nan")]}}, "'scheduler' has base_values"),
        ([1, 2, 3], "holds a list, not the trainer state"),
        ({**state, "rng": [{"torch": torch.zeros(3, dtype=torch.uint8)}]}, "its rng states are not this library's"),
    ]


@pytest.mark.parametrize("task", ["classify", "pretrain"])
def test_a_crafted_trainer_state_is_refused_naming_the_field(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trainer.pt of {} read "KeyError: 'optimizer'", wrong types "invalid literal for int()", and an epoch of
    10**12 was reported as completed with nothing trained."""
    for i, (crafted, expected) in enumerate(_crafted_states(_trainer(runs[task]))):
        run = _copy(runs[task], tmp_path / str(i))
        torch.save(crafted, run / "last" / "trainer.pt")
        argv = _argv(task, data, run)
        argv[argv.index("--epochs") + 1] = "3"
        assert _exit_code([*argv, "--resume", run]) == 2, expected
        line = _one_line(capsys)
        assert str(run / "last" / "trainer.pt") in line and expected in line, line
        assert "KeyError" not in line and "invalid literal" not in line


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code from the file ran"))


def test_a_raw_pickle_trainer_state_is_refused_unread(
    runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A raw-pickle trainer.pt printed torch's two-line warning and "Unsupported operand 149"; a malicious one was
    called "corrupt or truncated"."""
    marker = tmp_path / "pwned"
    payloads = [
        pickle.dumps(_trainer(runs["classify"]) | {"rng": []}),
        pickle.dumps({"optimizer": {}, "epoch": 1}, protocol=0),
        pickle.dumps({"a": _Payload(marker)}),
    ]
    for i, payload in enumerate(payloads):
        run = _copy(runs["classify"], tmp_path / str(i))
        (run / "last" / "trainer.pt").write_bytes(payload)
        argv = _argv("classify", data, run)
        argv[argv.index("--epochs") + 1] = "3"
        assert _exit_code([*argv, "--resume", run]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Warning" not in err and "weights_only" not in err, err
        assert "Unsupported operand" not in err and "corrupt" not in err
        assert f"{run / 'last' / 'trainer.pt'} was refused: it is a raw pickle, not a weights file" in err
    assert not marker.exists()


# -- 2c: non-finite weights on every load path -------------------------------------------------------------------


def _poison(folder: Path, file: str = "model.safetensors") -> str:
    """Put a NaN into the first floating-point tensor of ``folder/file`` (metadata kept); returns its name."""
    path = folder / file
    with safetensors.safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    weights = safetensors.torch.load_file(str(path))
    key = next(k for k, v in weights.items() if v.is_floating_point())
    weights[key] = weights[key].clone()
    weights[key].view(-1)[0] = float("nan")
    safetensors.torch.save_file(weights, str(path), metadata=metadata)
    return key


def test_non_finite_checkpoints_never_give_exit_0(
    runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN checkpoint gave exit 0 in predict ("8 nan") and eval ("loss nan" and an eval.json)."""
    photo = data / "photo.png"
    cases = []
    for task in ("classify", "segment", "detect", "denoise"):
        run = _copy(runs[task], tmp_path / task)
        _poison(run / "best")
        cases.append((task, run))
    enc = _copy(runs["pretrain"], tmp_path / "pretrain")
    _poison(enc / "encoder")
    out = tmp_path / "out"
    commands = [
        ["eval", "--checkpoint", tmp_path / "classify" / "classify", "--output", out / "1"],
        ["predict", "--checkpoint", tmp_path / "classify" / "classify", photo],
        ["predict", "--checkpoint", tmp_path / "segment" / "segment", photo, "--output", out / "2"],
        ["predict", "--checkpoint", tmp_path / "detect" / "detect", photo, "--output", out / "3"],
        ["restore", "--checkpoint", tmp_path / "denoise" / "denoise" / "best", photo, out / "r.png"],
        ["eval", "--checkpoint", enc / "encoder", "--output", out / "4"],
        ["viz", "gradcam", "--checkpoint", tmp_path / "classify" / "classify", photo, "--output", out / "5"],
    ]
    for argv in commands:
        assert _exit_code(argv) == 2, argv
        line = _one_line(capsys)
        assert "holds non-finite weights (first: " in line, line
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


@pytest.mark.parametrize("task", TASKS)
def test_resume_of_non_finite_weights_is_refused(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs[task], tmp_path)
    key = _poison(run / "last")
    argv = _argv(task, data, run)
    argv[argv.index("--epochs") + 1] = "3"
    assert _exit_code([*argv, "--resume", run]) == 2
    line = _one_line(capsys)
    assert f"{run / 'last'} holds non-finite weights" in line and key.split(".")[0] in line


def test_resume_of_non_finite_ema_weights_is_refused(
    runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["classify"], tmp_path)
    shutil.copy(run / "last" / "model.safetensors", run / "last" / "ema.safetensors")
    _poison(run / "last", "ema.safetensors")
    config = json.loads((run / "config.json").read_text())  # as if trained with EMA: a resume keeps its settings
    (run / "config.json").write_text(json.dumps({**config, "ema_decay": 0.9}))
    argv = _argv("classify", data, run)
    argv[argv.index("--epochs") + 1] = "3"
    assert _exit_code([*argv, "--resume", run, "--ema-decay", "0.9"]) == 2
    assert f"{run / 'last' / 'ema.safetensors'} holds non-finite weights" in _one_line(capsys)


@pytest.mark.parametrize("task", ["classify", "segment", "detect"])
def test_init_from_a_non_finite_checkpoint_is_refused(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["classify"], tmp_path)
    _poison(run / "best")
    argv = [*_argv(task, data, tmp_path / "new"), "--model", "vheat_micro", "--init-from", run / "best"]
    assert _exit_code(argv) == 2
    assert "holds non-finite weights" in _one_line(capsys)
    assert not (tmp_path / "new" / "last").exists()


# -- 3: a full disk -----------------------------------------------------------------------------------------------


def test_a_full_disk_while_saving_is_one_line_and_keeps_the_last_checkpoint(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk read "RuntimeError: [enforce fail at inline_container.cc:672]", nothing about space."""
    out = tmp_path / "run"
    real = save_module._write_bytes
    calls = [0]

    def write(path: Path, data: bytes) -> None:
        if path.name == "trainer.pt":
            calls[0] += 1
            if calls[0] == 2:  # the second epoch's last/: the disk is full
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 3])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(save_module, "_write_bytes", write)
    assert _exit_code(_argv("classify", data, out)) == 1
    line = _one_line(capsys)
    assert f"no space left on device while writing the checkpoint {out / 'last'}" in line
    assert f"the last intact checkpoint is {out / 'last'} (epoch 1)" in line
    assert read_meta(out / "last")["epoch"] == 1 and load_weights(out / "last")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".last")) == []


def test_a_file_size_limit_while_saving_in_a_real_process(data: Path, tmp_path: Path) -> None:
    """The same under a real limit (RLIMIT_FSIZE, as a small disk): the write fails in the kernel."""
    out = tmp_path / "run"
    ok = tmp_path / "ok"
    assert main(_argv("classify", data, ok)) == 0
    limit = (ok / "last" / "model.safetensors").stat().st_size + 4096  # the weights fit, the trainer state not
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from pdevision.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *_argv("classify", data, out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]  # after the log lines of the run: the error, one line
    assert "Traceback" not in proc.stderr and last.startswith("pdevision train: error: "), proc.stderr
    assert f"no space left on device while writing the checkpoint {out / 'last'}" in last
    assert "inline_container" not in proc.stderr and "no intact checkpoint exists yet" in last
    assert not (out / "last").exists() and not list(out.glob(".last.*"))


def _with_meta(folder: Path, dst: Path, **changes: object) -> Path:
    """A copy of the checkpoint ``folder`` at ``dst`` with its metadata changed."""
    shutil.copytree(folder, dst)
    with safetensors.safe_open(str(dst / "model.safetensors"), framework="pt") as f:
        metadata = {**f.metadata(), **{k: json.dumps(v) for k, v in changes.items()}}
    safetensors.torch.save_file(load_weights(dst), str(dst / "model.safetensors"), metadata=metadata)
    return dst


@pytest.mark.parametrize("size", [10**12, [10**12, 32], "abc", 1e12])
def test_an_absurd_image_size_in_the_metadata_is_one_line(
    size: object, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image size of 10**12 beside valid model arguments read "OverflowError: signed integer is greater than
    maximum" in eval (k-NN), and classification from that encoder "Storage size calculation overflowed"."""
    enc = _with_meta(runs["pretrain"] / "encoder", tmp_path / "encoder", img_size=size)
    clf = _with_meta(runs["classify"] / "best", tmp_path / "clf" / "best", img_size=size)
    for argv in (
        ["eval", "--checkpoint", enc, "--output", tmp_path / "e1"],
        [*_argv("classify", data, tmp_path / "r1"), "--init-from", enc],
        ["eval", "--checkpoint", clf, "--output", tmp_path / "e2"],
        ["predict", "--checkpoint", clf, data / "photo.png"],
    ):
        assert _exit_code(argv) == 2, argv
        line = _one_line(capsys)
        assert f"image size {size!r} in the checkpoint is not an integer from 1 to 16384" in line, line
    assert not (tmp_path / "r1" / "last").exists()


# -- issue 37: a resumed run obeys the run-folder rules ----------------------------------------------------------


def _without_output(argv: list[str]) -> list[str]:
    at = argv.index("--output")
    return argv[:at] + argv[at + 2 :]


def _epochs_in(run: Path) -> list[str]:
    return [line.split(",")[0] for line in (run / "metrics.csv").read_text().splitlines()[1:]]


@pytest.mark.parametrize("task", TASKS)
def test_resume_without_output_continues_in_its_own_folder(
    task: str,
    runs: dict[str, Path],
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``train --resume A`` continued A's run into ./runs/train, replacing another run there."""
    run = _copy(runs[task], tmp_path)
    work = tmp_path / "work"
    for default in ("train", "pretrain", "segment", "detect"):  # a run in each default folder: left as it was
        shutil.copytree(runs[task], work / "runs" / default, ignore=shutil.ignore_patterns(".lock"))
    before = _files(work)
    monkeypatch.chdir(work)
    argv = _without_output(_argv(task, data, run))
    argv[argv.index("--epochs") + 1] = "3"
    assert _exit_code([*argv, "--resume", run]) == 0, capsys.readouterr().err
    assert _files(work) == before
    assert _epochs_in(run) == ["1", "2", "3"]
    assert json.loads((run / "config.json").read_text())["output"] == str(run)


@pytest.mark.parametrize("task", TASKS)
def test_resume_into_another_folder_never_overwrites_its_files(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --resume A --output B`` overwrote the user's B/metrics.csv and B/config.json."""
    run = _copy(runs[task], tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("my own numbers\n")
    (mine / "config.json").write_text("{}\n")
    before, run_before = _files(mine), _files(run)
    argv = _argv(task, data, mine)
    argv[argv.index("--epochs") + 1] = "3"
    assert _exit_code([*argv, "--resume", run]) == 2
    line = _one_line(capsys)
    assert f"would continue into {mine}" in line and "config.json, metrics.csv" in line and str(run) in line
    assert _files(mine) == before and _files(run) == run_before
    # another run's folder is refused alike, and so is --overwrite with --resume (it would start over)
    assert _exit_code([*argv[:-1], str(_copy(runs[task], tmp_path / "b")), "--resume", run]) == 2
    assert "would continue into" in _one_line(capsys)
    assert _exit_code([*argv, "--resume", run, "--overwrite"]) == 2
    assert "--overwrite starts a new run" in _one_line(capsys)
    # a new folder is a copy that continues the run; the run resumed from stays as it was
    fork = tmp_path / "fork"
    argv = _argv(task, data, fork)
    argv[argv.index("--epochs") + 1] = "3"
    assert _exit_code([*argv, "--resume", run]) == 0
    assert _epochs_in(fork) == ["1", "2", "3"] and _files(run) == run_before


def _make_immutable(folder: Path) -> bool:
    """Make ``folder`` unwritable: permissions for a user, the immutable attribute for root (where supported)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return True
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    return subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode == 0


def _make_mutable(folder: Path) -> None:
    if os.geteuid() != 0:
        folder.chmod(0o755)
    elif shutil.which("chattr"):
        subprocess.run([shutil.which("chattr"), "-i", str(folder)], capture_output=True)


@pytest.mark.parametrize("task", TASKS)
def test_resuming_an_immutable_run_fails_in_one_line(
    task: str,
    runs: dict[str, Path],
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Resuming a read-only run "succeeded" with exit 0 by writing the continuation into ./runs/train."""
    run = _copy(runs[task], tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = _without_output(_argv(task, data, run))
    argv[argv.index("--epochs") + 1] = "3"
    if not _make_immutable(run):
        pytest.skip("no way to make a folder unwritable here (root without chattr)")
    try:
        before = _files(run)
        assert _exit_code([*argv, "--resume", run]) == 2
        line = _one_line(capsys)
        assert f"run folder {run} cannot be written" in line and "writable copy" in line
        assert _files(run) == before and not (tmp_path / "runs").exists()
    finally:
        _make_mutable(run)


@pytest.mark.parametrize("task", ["classify", "segment", "detect", "denoise"])
def test_resume_with_init_from_is_refused_in_one_line(
    task: str, runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume R --init-from R`` ignored --init-from without a word."""
    run = _copy(runs[task], tmp_path)
    before = _files(run)
    argv = _without_output(_argv(task, data, run))
    assert _exit_code([*argv, "--resume", run, "--init-from", run]) == 2
    line = _one_line(capsys)
    assert f"--init-from {run} and --resume {run} both give the starting weights" in line
    assert _files(run) == before


@pytest.mark.parametrize("task", TASKS)
def test_a_run_killed_in_its_first_save_gets_one_advice(
    task: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a kill during the first save, ``train --output o`` said "continue it with --resume o" and
    ``--resume o`` said "no checkpoint at o": both now say there is nothing to resume and that --overwrite
    starts over, which works."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"task": task}))
    (out / "metrics.csv").write_text("epoch\n")
    (out / ".last.tmp-999999-0a1b2c3d").mkdir()  # the save's folder of the killed writer
    (out / ".last.tmp-999999-0a1b2c3d" / "model.safe").write_bytes(b"half")
    argv = _argv(task, data, out)
    assert _exit_code(argv) == 2
    fresh = _one_line(capsys)
    assert _exit_code([*_without_output(argv), "--resume", out]) == 2
    resumed = _one_line(capsys)
    for line in (fresh, resumed):
        assert f"{out} holds a run that stopped before its first checkpoint" in line and "--overwrite" in line
    assert fresh.split("error: ", 1)[1] == resumed.split("error: ", 1)[1]
    assert _exit_code([*argv, "--overwrite"]) == 0
    assert (out / "last" / "model.safetensors").is_file()


# -- issue 37: one bounded reader of checkpoint metadata, for every command ------------------------------------


def _with_raw_meta(folder: Path, dst: Path, **raw: str) -> Path:
    """A copy of the checkpoint ``folder`` at ``dst`` with metadata values set to the raw strings ``raw``."""
    shutil.copytree(folder, dst)
    with safetensors.safe_open(str(dst / "model.safetensors"), framework="pt") as f:
        metadata = {**f.metadata(), **raw}
    safetensors.torch.save_file(load_weights(dst), str(dst / "model.safetensors"), metadata=metadata)
    return dst


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"model_args": "[" * 100_000 + "]" * 100_000}, "'model_args' metadata nested 100000 levels deep"),
        ({"classes": '{"a":' * 3000 + "1" + "}" * 3000}, "'classes' metadata nested 3000 levels deep"),
        ({"epoch": "9" * 5000}, "'epoch' metadata that cannot be read as JSON"),
        ({"model": "{not json"}, "'model' metadata that is not JSON"),
    ],
    ids=["deep-list", "deep-object", "5000-digits", "not-json"],
)
def test_unreadable_metadata_is_one_line_naming_the_file_in_every_command(
    raw: dict[str, str],
    expected: str,
    runs: dict[str, Path],
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Metadata nested deeper than Python's recursion limit gave a traceback in eval and predict, exit 1 without
    the file named in viz and --init-from, and "try a smaller --tile" in restore."""
    clf = _with_raw_meta(runs["classify"] / "best", tmp_path / "clf" / "best", **raw)
    ir = _with_raw_meta(runs["denoise"] / "best", tmp_path / "ir" / "best", **raw)
    enc = _with_raw_meta(runs["pretrain"] / "encoder", tmp_path / "enc" / "encoder", **raw)
    seg = _with_raw_meta(runs["segment"] / "best", tmp_path / "seg" / "best", **raw)
    cases = [
        (["eval", "--checkpoint", clf, "--output", tmp_path / "e1"], clf),
        (["eval", "--checkpoint", enc, "--output", tmp_path / "e2"], enc),
        (["eval", "--checkpoint", seg, "--output", tmp_path / "e3"], seg),
        (["predict", "--checkpoint", clf, data / "photo.png"], clf),
        (["predict", "--checkpoint", seg, data / "photo.png"], seg),
        (["viz", "erf", "--checkpoint", clf, "--output", tmp_path / "v1", "--images", "2"], clf),
        (["viz", "gradcam", "--checkpoint", clf, data / "photo.png", "--output", tmp_path / "v2"], clf),
        ([*_argv("classify", data, tmp_path / "r1"), "--init-from", clf], clf),
        ([*_argv("segment", data, tmp_path / "r2"), "--init-from", enc], enc),
        ([*_argv("denoise", data, tmp_path / "r3"), "--init-from", ir], ir),
        (["restore", "--checkpoint", ir, data / "photo.png", tmp_path / "out.png"], ir),
    ]
    for argv, folder in cases:
        assert _exit_code(argv) == 2, argv
        line = _one_line(capsys)
        assert f"checkpoint file {folder / 'model.safetensors'} has {expected}" in line, (argv, line)
        assert len(line) < 400, line
    assert not (tmp_path / "out.png").exists() and not (tmp_path / "r1" / "last").exists()
