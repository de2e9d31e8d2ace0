"""Trainer features of issue 55: gradient accumulation (equal to the larger batch), channels-last, per-update
TensorBoard scalars, the tracker hook (``fit(..., loggers=[...])``, ``--logger``) and the ``--compile`` notice."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from pdevision.cli import main
from pdevision.engine import RunConfig, Task, fit
from pdevision.engine.checkpoint import load_weights
from pdevision.engine.loggers import RunLogger


class Classify(Task):
    """Three classes of 6-d points, a model without batch norm (a linear layer after a small conv)."""

    name = "toy"
    best_metric, higher_is_better = "loss", False

    def __init__(self, conv: bool = False) -> None:
        self.conv = conv
        self.seen_channels_last: list[bool] = []

    def datasets(self):
        g = torch.Generator().manual_seed(0)
        shape = (32, 3, 4, 4) if self.conv else (32, 6)
        data = torch.utils.data.TensorDataset(torch.randn(*shape, generator=g), torch.randint(0, 3, (32,), generator=g))
        return data, data

    def create_model(self):
        torch.manual_seed(0)
        if self.conv:
            return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(16, 3))
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))

    def train_step(self, model, batch):
        x, y = batch
        if self.conv:
            conv = getattr(model, "module", model)[0]
            self.seen_channels_last.append(
                x.is_contiguous(memory_format=torch.channels_last)
                and conv.weight.is_contiguous(memory_format=torch.channels_last)
            )
        return torch.nn.functional.cross_entropy(model(x), y), {}

    @torch.no_grad()
    def evaluate(self, model, ctx):
        x, y = ctx.to_device(self.val_set.tensors)
        return {"loss": torch.nn.functional.cross_entropy(model(x), y).item()}

    def checkpoint_meta(self):
        return {"model": "toy"}


def _run(out: Path, **kw) -> RunConfig:
    settings = dict(epochs=2, lr=0.05, opt="adamw", weight_decay=0.0, progress=False, output=str(out))
    return RunConfig(**{**settings, **kw})


def test_accumulated_batches_give_the_update_of_one_larger_batch(tmp_path: Path) -> None:
    """4 batches of 4 accumulated: the same updates (one per 16 samples, two per epoch) as batches of 16."""
    small = fit(Classify(), _run(tmp_path / "small", batch_size=4, grad_accum_steps=4))
    large = fit(Classify(), _run(tmp_path / "large", batch_size=16))
    unaccumulated = fit(Classify(), _run(tmp_path / "plain", batch_size=4))
    assert small["steps"] == large["steps"] == 4 and unaccumulated["steps"] == 16
    a, b = load_weights(tmp_path / "small" / "last"), load_weights(tmp_path / "large" / "last")
    c = load_weights(tmp_path / "plain" / "last")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a[k], c[k], atol=1e-4) for k in a)  # the test can tell the difference


def test_an_epochs_last_short_group_is_one_update(tmp_path: Path) -> None:
    summary = fit(Classify(), _run(tmp_path / "r", epochs=1, batch_size=4, grad_accum_steps=3))
    assert summary["steps"] == 3  # 8 batches: groups of 3, 3 and 2


def test_channels_last_model_and_batches(tmp_path: Path) -> None:
    task = Classify(conv=True)
    fit(task, _run(tmp_path / "r", epochs=1, batch_size=8, channels_last=True))
    assert task.seen_channels_last == [True] * 4
    plain = Classify(conv=True)
    fit(plain, _run(tmp_path / "p", epochs=1, batch_size=8))
    assert plain.seen_channels_last == [False] * 4


class Recorder:
    """A tracker of the protocol: what the loop gives it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []
        self.closed = False

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.calls.append((dict(scalars), step))

    def close(self) -> None:
        self.closed = True


def test_a_tracker_gets_every_update_and_every_epoch(tmp_path: Path) -> None:
    recorder = Recorder()
    assert isinstance(recorder, RunLogger)
    fit(Classify(), _run(tmp_path / "r", batch_size=8), loggers=[recorder])
    steps = [(s, step) for s, step in recorder.calls if "train/step_loss" in s]
    epochs = [(s, step) for s, step in recorder.calls if "epoch/epoch" in s]
    assert [step for _, step in steps] == list(range(1, 9)) and all("train/lr" in s for s, _ in steps)
    assert [(s["epoch/epoch"], step) for s, step in epochs] == [(1.0, 4), (2.0, 8)]
    assert "epoch/val_loss" in epochs[0][0] and recorder.closed


def test_per_update_scalars_in_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")  # the [train] extra
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fit(Classify(), _run(tmp_path / "r", batch_size=8))
    events = EventAccumulator(str(tmp_path / "r" / "tensorboard"))
    events.Reload()
    losses = events.Scalars("train/step_loss")
    assert [e.step for e in losses] == list(range(1, 9)) and all(e.value > 0 for e in losses)
    assert len(events.Scalars("train/lr")) == 8 and len(events.Scalars("val_loss")) == 2  # the epoch rows too


def test_logger_flag_names_a_missing_tracker_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("tomllib")
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed")
    assert main(["train", "--logger", "wandb", "--output", str(tmp_path / "r"), "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "pdevision train: error: --logger wandb needs the wandb package, which is not installed; run: pip install wandb"
    ]
    assert not (tmp_path / "r").exists()


def test_compile_says_so_and_how_long_it_took(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        fit(Classify(), _run(tmp_path / "r", epochs=1, batch_size=16, compile=True))
    said = [r.getMessage() for r in caplog.records if "compil" in r.getMessage()]
    assert said[0] == "compiling the model with torch.compile at its first step ..."
    assert said[1].startswith("compiled in ") and said[1].endswith(" s (the first step)") and len(said) == 2
