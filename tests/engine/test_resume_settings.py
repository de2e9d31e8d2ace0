"""``train --resume RUN/last`` alone continues the run as its config.json records it (issue 55): the same metrics,
weights and config.json as the run that was never stopped; a changed setting is refused in one line; more epochs
are accepted and recorded."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import safetensors.torch
import torch

from pdevision.cli import main
from pdevision.engine.resume import continued_config, restorable_settings
from pdevision.errors import UsageError

# settings that are not the defaults, so that a resume taking the defaults would show
RUN = "--epochs 2 --img-size 32 --batch-size 16 --max-train-batches 2 --deterministic --ema-decay 0.9 --lr 0.003"
TIMES = ("epoch_seconds", "seconds", "train_images_per_s")


def _rows(run: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in TIMES} for row in csv.DictReader(open(run / "metrics.csv"))]


def _config(run: Path) -> dict:
    return {k: v for k, v in json.loads((run / "config.json").read_text()).items() if k != "output"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    full, part = root / "full", root / "part"
    assert main(["train", "--output", str(full), *RUN.split()]) == 0
    assert main(["train", "--output", str(part), *RUN.split(), "--stop-after-epochs", "1"]) == 0
    assert len(_rows(part)) == 1
    return full, part


def test_resume_alone_continues_the_run_as_recorded(runs: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    full, part = runs
    recorded = json.loads((part / "config.json").read_text())
    assert main(["train", "--resume", str(part / "last")]) == 0, capsys.readouterr().err
    assert _rows(part) == _rows(full) and len(_rows(full)) == 2
    assert _config(part) == _config(full)
    assert _config(full)["pretrained_cfg"]["input_size"] == [3, 32, 32]  # timm's keys beside the settings
    assert json.loads((part / "config.json").read_text())["output"] == recorded["output"]
    for name in ("model.safetensors", "ema.safetensors"):
        a = safetensors.torch.load_file(str(full / "last" / name))
        b = safetensors.torch.load_file(str(part / "last" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_changed_setting_is_refused_in_one_line(runs: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, part = runs
    before = (part / "config.json").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(part), "--lr", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lr 0.5 differs from the run's 0.003" in err[0], err
    assert (part / "config.json").read_bytes() == before  # never rewritten with settings it did not run under


def test_more_epochs_are_accepted_and_recorded(runs: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    full, _ = runs
    assert main(["train", "--resume", str(full), "--epochs", "3"]) == 0, capsys.readouterr().err
    config = json.loads((full / "config.json").read_text())
    assert config["epochs"] == 3 and config["resumed"] == [{"after_epoch": 2, "epochs": [2, 3]}]
    assert [int(r["epoch"]) for r in _rows(full)] == [1, 2, 3]
    assert config["lr"] == 0.003 and config["ema_decay"] == 0.9 and config["max_train_batches"] == 2


def test_what_a_resume_restores_and_keeps() -> None:
    recorded = {
        "model": "m",
        "lr": 0.1,
        "epochs": 2,
        "device": "cuda",
        "stop_after_epochs": 1,
        "resume": None,
        "init_from": "a/best",
        "output": "r",
        "resumed": [{"after_epoch": 1, "epochs": [1, 2]}],
    }
    assert restorable_settings(recorded) == {"model": "m", "lr": 0.1, "epochs": 2}
    now = {**recorded, "device": "cpu", "stop_after_epochs": None, "resume": "r/last", "init_from": None}
    del now["resumed"]
    out = continued_config(recorded, now, "r/last", own_folder=True, epoch=2)
    assert out["device"] == "cpu" and out["stop_after_epochs"] is None  # the invocation's own
    assert out["resume"] is None and out["init_from"] == "a/best"  # the run's origin
    assert out["resumed"] == recorded["resumed"]
    copy = continued_config(recorded, {**now, "output": "c"}, "r/last", own_folder=False, epoch=2)
    assert copy["resume"] == "r/last" and copy["output"] == "c"  # a copy in a new folder: continued from r
    with pytest.raises(UsageError, match=r"--model n differs from the run's m "):
        continued_config(recorded, {**now, "model": "n"}, "r/last", own_folder=True, epoch=2)
