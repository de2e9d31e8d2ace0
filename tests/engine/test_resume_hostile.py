"""Issue 61's closing sweep, ``pdevision train --resume``: a run folder whose ``config.json`` is missing, cut short, not
JSON, not a mapping or holds values of the wrong types; settings given again with other values (each kind refused,
more ``--epochs`` accepted and recorded); ``--resume`` at a file, at ``best/``, at folders that hold no run, at a run of
another task, at a run whose ``last/`` is missing or half-written, and at a finished run. Each ends in one line with
exit 2 naming what was wrong and what was expected, with the run's checkpoints and ``config.json`` as they were, or
in a continued run."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from pdevision.engine.hub import GIVEN_MODEL_ARGS
from pdevision.engine.resume import INVOCATION
from tests.helpers import digit_folder, exit_code, one_line_exit_2

# a tiny run: 2 images a class and split, one batch an epoch, stopped after the first of two epochs
RUN = "--img-size 32 --batch-size 8 --max-train-batches 1 --lr 0.003 --no-progress".split()


def _sums(run: Path) -> dict[str, str]:
    """A digest of each file of the run's checkpoints and records (what a refused resume must leave as it was)."""
    files = [p for p in sorted(run.rglob("*")) if p.is_file() and "tensorboard" not in p.parts and p.name != ".lock"]
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return digit_folder(tmp_path_factory.mktemp("digits"), per_split=2, img_size=32)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    """A classify run stopped after epoch 1 of 2 (read only: each test works on a copy)."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    assert (
        exit_code(
            ["train", "--output", str(run), "--data", str(data), *RUN, "--epochs", "2", "--stop-after-epochs", "1"]
        )
        == 0
    )
    assert len(_rows(run)) == 1 and (run / "last" / "trainer.pt").is_file()
    return run


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    run = tmp_path_factory.mktemp("finished") / "run"
    assert exit_code(["train", "--output", str(run), "--data", str(data), *RUN, "--epochs", "1"]) == 0
    return run


def _copy(run: Path, to: Path, linked: bool = True) -> Path:
    """A copy of ``run``; ``linked``: its files hard links (cheap), for a test that replaces a file (never writes
    into one) or a resume that is refused before anything is written."""
    shutil.copytree(run, to, copy_function=os.link if linked else shutil.copy2)
    return to


def _replace(path: Path, data: bytes | str) -> None:
    """``path`` with new content, as a new file (a hard-linked original is left as it was)."""
    path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


# -- the run's config.json ---------------------------------------------------------------------------------------


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text())


CONFIG_CASES = {
    "truncated": (lambda t: t[: len(t) // 2], "cannot be read"),
    "empty": (lambda t: "", "cannot be read"),
    "not-json": (lambda t: "epochs: 2\n", "cannot be read"),
    "binary": (lambda t: "\x00\x01\x02\xff", "cannot be read"),
    "a-list": (lambda t: "[1, 2]", "are not a mapping"),
    "a-string": (lambda t: '"run"', "are not a mapping"),
    "null": (lambda t: "null", "are not a mapping"),
    "nested-100000": (lambda t: "[" * 100000 + "]" * 100000, "nested 100000 levels deep"),
    "digits-5000": (lambda t: '{"epochs": ' + "9" * 5000 + "}", "cannot be read"),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_an_unreadable_config_json_is_one_line_naming_it(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    change, message = CONFIG_CASES[case]
    _replace(run / "config.json", change((run / "config.json").read_text()))
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run / "last"], capsys)
    assert "config.json" in err and message in err, err
    assert _sums(run) == before


def _no_config(run: Path) -> None:
    (run / "config.json").unlink()


MISSING = {
    "deleted": (_no_config, "are missing"),
    "a-folder": (lambda run: (_no_config(run), (run / "config.json").mkdir()), "are a folder"),
    "a-fifo": (lambda run: (_no_config(run), os.mkfifo(run / "config.json")), "FIFO"),
    "a-dangling-link": (lambda run: (_no_config(run), (run / "config.json").symlink_to(run / "gone")), "not a file"),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_a_run_without_its_config_json_is_not_continued_with_other_settings(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``config.json`` the run's settings are unknown: it went on with the defaults (30 epochs of another
    schedule), the defect of issue 55 by another road."""
    run = _copy(stopped, tmp_path / "run")
    make, message = MISSING[case]
    make(run)
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run / "last"], capsys)
    assert "config.json" in err and message in err and "put the run's config.json back" in err, err
    assert _sums(run) == before


# (key, value, what the line says): each value goes through its flag's own check
VALUE_CASES = {
    "epochs-a-word": ("epochs", "two", "epochs (--epochs): must be an integer"),
    "epochs-zero": ("epochs", 0, "epochs (--epochs): must be an integer in [1,"),
    "epochs-a-list": ("epochs", [2], "epochs (--epochs): takes one value"),
    "epochs-true": ("epochs", True, "epochs (--epochs): must be a value of the flag"),
    "lr-negative": ("lr", -0.1, "lr (--lr): must be"),
    "lr-nan": ("lr", float("nan"), "lr (--lr): must be a finite number"),
    "lr-a-dict": ("lr", {"value": 0.1}, "lr (--lr): must be"),
    "batch-size-a-string": ("batch_size", "eight", "batch_size (--batch-size): must be a positive integer"),
    "img-size-huge": ("img_size", 10**6, "img_size (--img-size): must be an integer in [1, 16384]"),
    "model-a-number": ("model", 5, "model"),
    "model-unknown": ("model", "no_such_model", "no_such_model"),
    "model-args-a-list": ("model_args", [1, 2], "model_args (--model-args): takes one value"),
    "model-args-a-url": ("model_args", {"pretrained_cfg_overlay": {"url": "http://x"}}, "could make the library"),
    "seed-null": ("seed", None, "seed (--seed): must have a value, got null"),
    "deterministic-a-string": ("deterministic", "yes", "deterministic (--deterministic): must be true or false"),
    "amp-unknown": ("amp", "fp8", "amp (--amp): must be one of"),
    "unknown-key": ("epochz", 3, "unknown key 'epochz'"),
    "key-of-another-task": ("decoder_channels", 64, "unknown key 'decoder_channels'"),
    "sched-changed": ("sched", "step", "sched has no flag; only its default"),
    "task-unknown": ("task", "nope", "task 'nope' is not one of"),
    "task-a-list": ("task", ["classify"], "task ['classify'] is not one of"),
}


@pytest.mark.parametrize("case", list(VALUE_CASES))
def test_a_recorded_setting_of_the_wrong_type_is_one_line_naming_it(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    key, value, message = VALUE_CASES[case]
    config = _config(run)
    if key == "model_args" and GIVEN_MODEL_ARGS in config:  # beside timm's keys, the run's own are under this name
        key = GIVEN_MODEL_ARGS
    _replace(run / "config.json", json.dumps({**config, key: value}))
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run], capsys)
    assert message in err, err
    assert _sums(run) == before


@pytest.mark.parametrize(
    "history",
    ["after epoch 1", 5, {"after_epoch": 1}, [1, 2], [{"after_epoch": "one"}], [None]],
    ids=["a-string", "a-number", "a-mapping", "numbers", "a-word-for-the-epoch", "null"],
)
def test_a_resumed_list_that_is_not_a_list_of_changes_is_one_line(
    history: object, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``config.json``'s ``resumed``: the changes of earlier resumes, a list of ``{"after_epoch": N, ...}``; anything
    else was carried on (a string became a list of its letters) or ended in a ``TypeError`` (exit 1)."""
    run = _copy(stopped, tmp_path / "run")
    _replace(run / "config.json", json.dumps({**_config(run), "resumed": history}))
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run, "--epochs", "3"], capsys)
    assert "resumed" in err and "config.json" in err and "list" in err, err
    assert _sums(run) == before


# -- settings given again ----------------------------------------------------------------------------------------

# flag and a value other than the run's: each changes what the run means
CHANGED = {
    "model": ["--model", "pderesnet_micro"],
    "model-args": ["--model-args", '{"depths": [1, 1, 1, 1]}'],
    "lr": ["--lr", "0.5"],
    "batch-size": ["--batch-size", "4"],
    "img-size": ["--img-size", "48"],
    "seed": ["--seed", "7"],
    "opt": ["--opt", "sgd"],
    "weight-decay": ["--weight-decay", "0.1"],
    "momentum": ["--momentum", "0.5"],
    "min-lr": ["--min-lr", "0.001"],
    "clip-grad": ["--clip-grad", "1"],
    "ema-decay": ["--ema-decay", "0.5"],
    "max-train-batches": ["--max-train-batches", "2"],
    "grad-accum-steps": ["--grad-accum-steps", "2"],
    "deterministic": ["--deterministic"],
    "channels-last": ["--channels-last"],
    "val-split": ["--val-split", "0.5"],
    "recipe": ["--recipe", "vheat"],
    "drop-path": ["--drop-path", "0.2"],
    "mixup": ["--mixup", "0.4"],
    "label-smoothing": ["--label-smoothing", "0.3"],
    "hflip": ["--hflip", "0.5"],
    "time-budget": ["--time-budget", "60"],
}


@pytest.mark.parametrize("case", list(CHANGED))
def test_a_changed_setting_is_refused_naming_its_flag(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    before = _sums(run)
    flags = CHANGED[case]
    err = one_line_exit_2(["train", "--resume", run / "last", *flags], capsys)
    assert f"{flags[0]} " in err and "differs from the run's" in err and "recorded in its config.json" in err, err
    assert _sums(run) == before  # config.json never rewritten, the checkpoint untouched


def test_another_data_folder_is_refused(
    stopped: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    other = digit_folder(tmp_path / "other", per_split=2, img_size=32)
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run, "--data", other], capsys)
    assert f"--data {other} differs from the run's {data}" in err, err
    assert _sums(run) == before


def test_another_task_on_the_command_line_is_refused(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    before = _sums(run)
    err = one_line_exit_2(["train", "--task", "segment", "--resume", run], capsys)
    assert "--task segment differs from the run's classify" in err, err
    assert _sums(run) == before


def test_more_epochs_are_accepted_and_recorded(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run", linked=False)
    recorded = _config(run)
    assert exit_code(["train", "--resume", str(run / "last"), "--epochs", "3", "--device", "cpu"]) == 0
    config = _config(run)
    assert config["epochs"] == 3 and config["resumed"] == [{"after_epoch": 1, "epochs": [2, 3]}]
    kept = INVOCATION | {"epochs", "resumed", "warmup_epochs"}
    assert {k: v for k, v in config.items() if k not in kept} == {k: v for k, v in recorded.items() if k not in kept}
    assert [r["epoch"] for r in _rows(run)] == ["1", "2", "3"]


def test_the_settings_of_one_invocation_change_nothing_recorded(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--device``, ``--workers``, ``--threads``, ``--stop-after-epochs``: where and how far this command runs, not
    what the run is; accepted and not recorded as a change."""
    run = _copy(stopped, tmp_path / "run", linked=False)
    recorded = _config(run)
    argv = ["train", "--resume", str(run), "--device", "cpu", "--workers", "0", "--threads", "1"]
    assert exit_code([*argv, "--stop-after-epochs", "1"]) == 0  # stops where it already is: nothing trained
    assert len(_rows(run)) == 1
    config = _config(run)
    assert "resumed" not in config
    assert {k: v for k, v in config.items() if k not in INVOCATION} == {
        k: v for k, v in recorded.items() if k not in INVOCATION
    }


# -- what --resume points at -------------------------------------------------------------------------------------


def test_resume_at_the_weights_file_continues_its_run(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run", linked=False)
    assert exit_code(["train", "--resume", str(run / "last" / "model.safetensors")]) == 0, capsys.readouterr().err
    assert [r["epoch"] for r in _rows(run)] == ["1", "2"] and _config(run)["epochs"] == 2


POINTED = {
    "config-json": (lambda run: run / "config.json", "no checkpoint at"),
    "trainer-pt": (lambda run: run / "last" / "trainer.pt", "no checkpoint at"),
    "metrics-csv": (lambda run: run / "metrics.csv", "no checkpoint at"),
    "missing": (lambda run: run / "nope", "no checkpoint at"),
    "an-empty-folder": (lambda run: _mkdir(run.parent / "empty"), "no checkpoint at"),
    "a-folder-of-images": (lambda run: _mkdir(run.parent / "images", "a.png"), "no checkpoint at"),
    "best": (lambda run: run / "best", "best"),
    "tensorboard": (lambda run: run / "tensorboard", "no checkpoint at"),
    "a-fifo": (lambda run: _fifo(run.parent / "fifo"), "no checkpoint at"),
    "a-dangling-link": (lambda run: _link(run.parent / "link", run.parent / "nowhere"), "no checkpoint at"),
}


def _mkdir(path: Path, *files: str) -> Path:
    path.mkdir()
    for name in files:
        (path / name).write_bytes(b"not an image")
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


@pytest.mark.parametrize("case", list(POINTED))
def test_resume_at_what_is_not_a_runs_checkpoint_is_one_line(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    where, message = POINTED[case]
    target = where(run)
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", target, "--output", tmp_path / "out"], capsys)
    assert message in err and str(target) in err, err
    assert _sums(run) == before and not (tmp_path / "out").exists()


def test_resume_of_a_run_of_another_task_is_one_line(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's config.json says segment, its checkpoint is a classifier's."""
    run = _copy(stopped, tmp_path / "run")
    recorded = {k: v for k, v in _config(run).items() if k in ("epochs", "batch_size", "img_size", "lr", "seed")}
    _replace(run / "config.json", json.dumps({"task": "segment", **recorded}))
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run], capsys)
    assert "classify" in err and "segment" in err, err
    assert _sums(run) == before


def test_a_kill_between_the_renames_of_a_save_resumes_from_the_backup(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A save killed after ``last/`` became ``.last.old`` and before the new folder took its place: the backup is the
    run's checkpoint, and the run continues from it."""
    run = _copy(stopped, tmp_path / "run", linked=False)
    (run / "last").rename(run / ".last.old")
    assert exit_code(["train", "--resume", str(run)]) == 0, capsys.readouterr().err
    assert [r["epoch"] for r in _rows(run)] == ["1", "2"]
    assert (run / "last" / "model.safetensors").is_file()


def test_a_half_written_save_beside_the_checkpoint_is_not_resumed_from(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A temporary folder of a killed save (``.last.tmp-*``, half its files) is never taken for the checkpoint."""
    run = _copy(stopped, tmp_path / "run", linked=False)
    tmp = run / ".last.tmp-999999-abc"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes((run / "last" / "model.safetensors").read_bytes()[:100])
    assert exit_code(["train", "--resume", str(run)]) == 0, capsys.readouterr().err
    assert [r["epoch"] for r in _rows(run)] == ["1", "2"]


HALF = {
    "weights-truncated": ("model.safetensors", lambda b: b[: len(b) // 2], "model.safetensors"),
    "weights-empty": ("model.safetensors", lambda b: b"", "model.safetensors"),
    "weights-garbage": ("model.safetensors", lambda b: b"\xff" * 64, "model.safetensors"),
    "trainer-truncated": ("trainer.pt", lambda b: b[: len(b) // 2], "trainer.pt"),
    "trainer-empty": ("trainer.pt", lambda b: b"", "trainer.pt"),
    "trainer-missing": ("trainer.pt", None, "trainer.pt"),
}


@pytest.mark.parametrize("case", list(HALF))
def test_a_half_written_last_is_one_line_naming_the_file(
    case: str, stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    name, change, message = HALF[case]
    path = run / "last" / name
    if change is None:
        path.unlink()
    else:
        _replace(path, change(path.read_bytes()))
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run], capsys)
    assert message in err, err
    assert _sums(run) == before


def test_a_run_whose_last_is_gone_is_one_line(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(stopped, tmp_path / "run")
    shutil.rmtree(run / "last")
    before = _sums(run)
    err = one_line_exit_2(["train", "--resume", run], capsys)
    assert str(run) in err and "last" in err, err
    assert _sums(run) == before


def test_resume_of_a_finished_run_trains_nothing_and_keeps_it(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(finished, tmp_path / "run", linked=False)
    weights = {n: (run / n / "model.safetensors").read_bytes() for n in ("last", "best")}
    rows = _rows(run)
    assert exit_code(["train", "--resume", str(run)]) == 0, capsys.readouterr().err
    assert _rows(run) == rows
    assert all((run / n / "model.safetensors").read_bytes() == w for n, w in weights.items())
    assert "resumed" not in _config(run)
