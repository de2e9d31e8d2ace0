"""The training loop on the embedded digits: outputs, bitwise resume, NaN stop, fine-tuning, peers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import safetensors.torch
import torch

from pdevision.engine import CheckpointError, NonFiniteLossError, RunConfig
from pdevision.engine.checkpoint import load_trainer_state, read_meta
from pdevision.tasks.classify import ClassifyConfig, train
from tests.helpers import make

FAST = dict(img_size=32, batch_size=32, max_train_batches=3, progress=False)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(folder / "model.safetensors"))


def test_run_writes_metrics_checkpoints_summary_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = train(make(ClassifyConfig, **FAST, output=str(out), epochs=2, ema_decay=0.9))
    assert summary["epochs_run"] == 2 and summary["status"] == "completed"
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert float(rows[-1]["val_top1"]) > 10.0  # better than chance after a few steps
    for name in ("last", "best"):
        assert (out / name / "model.safetensors").exists()
    assert (out / "last" / "ema.safetensors").exists()
    assert (out / "curves.png").stat().st_size > 1000
    assert json.loads((out / "summary.json").read_text())["best_val_top1"] == summary["best_val_top1"]
    meta = read_meta(out / "last")
    assert meta["model"] == "vheat_micro" and meta["classes"] == [str(i) for i in range(10)]
    assert meta["epoch"] == 2
    state = load_trainer_state(out / "last")  # weights_only=True
    assert state["epoch"] == 1 and "optimizer" in state and len(state["rng"]) == 1
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_is_bitwise_identical(tmp_path: Path) -> None:
    common = dict(epochs=3, deterministic=True, ema_decay=0.9, mixup=0.2, **FAST)
    train(make(ClassifyConfig, **common, output=str(tmp_path / "full")))
    train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), stop_after_epochs=1))
    assert read_meta(tmp_path / "part" / "last")["epoch"] == 1
    summary = train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), resume=str(tmp_path / "part")))
    assert summary["epochs_run"] == 3
    rows = list(csv.DictReader(open(tmp_path / "part" / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    full, part = _weights(tmp_path / "full" / "last"), _weights(tmp_path / "part" / "last")
    assert full.keys() == part.keys()
    for key in full:
        assert torch.equal(full[key], part[key]), key
    ema_full = safetensors.torch.load_file(str(tmp_path / "full" / "last" / "ema.safetensors"))
    ema_part = safetensors.torch.load_file(str(tmp_path / "part" / "last" / "ema.safetensors"))
    assert all(torch.equal(ema_full[k], ema_part[k]) for k in ema_full)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    train(make(ClassifyConfig, **FAST, output=str(out), epochs=1))
    before = _weights(out / "last")
    calls = {"n": 0}
    original = torch.nn.CrossEntropyLoss.forward

    def poisoned(self, logits, target):  # the loss turns NaN on the second step of the next run
        calls["n"] += 1
        loss = original(self, logits, target)
        return loss * float("nan") if calls["n"] >= 2 else loss

    monkeypatch.setattr(torch.nn.CrossEntropyLoss, "forward", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"non-finite training loss .* epoch 2, step 2.*intact"):
        train(make(ClassifyConfig, **FAST, output=str(out), epochs=3, resume=str(out / "last")))
    after = _weights(out / "last")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert read_meta(out / "last")["epoch"] == 1


def test_fine_tune_with_reset_head_and_class_mismatch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    train(make(ClassifyConfig, **FAST, output=str(src), epochs=1))
    root = tmp_path / "folder"
    from PIL import Image

    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (40, 40), color=(40 * i, 100 if c == "a" else 0, 0)).save(root / c / f"{i}.png")
    args = dict(data=str(root), epochs=1, img_size=32, batch_size=4, progress=False, val_split=0.5)
    with pytest.raises(CheckpointError, match=r"trained for 10 classes.*--reset-head"):
        train(make(ClassifyConfig, init_from=str(src / "last"), **args, output=str(tmp_path / "ft")))
    summary = train(
        make(ClassifyConfig, init_from=str(src / "last"), reset_head=True, **args, output=str(tmp_path / "ft"))
    )
    assert summary["classes"] == ["a", "b"]
    tuned, source = _weights(tmp_path / "ft" / "last"), _weights(src / "last")
    assert tuned["head.fc.weight"].shape == (2, source["head.fc.weight"].shape[1])
    with pytest.raises(CheckpointError, match="holds a 'vheat_micro' model, not 'resnet18'"):
        train(make(ClassifyConfig, model="resnet18", init_from=str(src / "last"), **FAST, output=str(tmp_path / "x")))


@pytest.mark.slow
def test_timm_peer_and_full_recipe_flags(tmp_path: Path) -> None:
    summary = train(
        ClassifyConfig(
            model="resnet18",
            recipe="imagenet",
            grad_checkpointing=False,
            img_size=32,
            run=RunConfig(
                output=str(tmp_path / "r18"),
                epochs=1,
                warmup_epochs=0,
                amp="bf16",
                batch_size=16,
                max_train_batches=2,
                progress=False,
            ),
        )
    )
    assert summary["epochs_run"] == 1 and summary["model"] == "resnet18"
    config = json.loads((tmp_path / "r18" / "config.json").read_text())
    assert config["auto_augment"] == "rand-m9-mstd0.5-inc1" and config["mixup"] == 0.8 and config["re_prob"] == 0.25


def test_grad_checkpointing_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pdevision.models import VHeat

    calls: list[bool] = []
    original = VHeat.set_grad_checkpointing
    monkeypatch.setattr(
        VHeat, "set_grad_checkpointing", lambda self, enable=True: (calls.append(enable), original(self, enable))
    )
    summary = train(make(ClassifyConfig, grad_checkpointing=True, **FAST, output=str(tmp_path / "gc"), epochs=1))
    assert summary["epochs_run"] == 1 and calls == [True]


NO_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as if not installed: the core install
from pdevision.cli import main
sys.exit(main(["train", "--output", sys.argv[1], "--epochs", "1", "--img-size", "32", "--batch-size", "32",
               "--max-train-batches", "2", "--no-progress"]))
"""


def test_train_runs_without_matplotlib_and_says_so_in_one_line(tmp_path: Path) -> None:
    """The core install trains: curves.png is drawn only where matplotlib is importable (issue 55)."""
    import subprocess
    import sys

    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", NO_MATPLOTLIB, str(run)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if "matplotlib" in line]
    assert said == ['curves.png will not be drawn: matplotlib is not installed; run: pip install "pdevision[train]"']
    assert (run / "last" / "model.safetensors").is_file() and (run / "summary.json").is_file()
    assert not (run / "curves.png").exists()
