"""The task interface: the docstring's minimal example runs through the one loop."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch

from pdevision.engine import RunConfig, Task, fit
from pdevision.engine.checkpoint import read_meta


class Regress(Task):
    best_metric, higher_is_better = "mse", False

    def datasets(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=g)
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return data, data

    def create_model(self):
        return torch.nn.Linear(8, 1)

    def train_step(self, model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y), {}

    @torch.no_grad()
    def evaluate(self, model, ctx):
        total, n = 0.0, 0
        for x, y in ctx.loader(self.val_set):
            x, y = ctx.to_device((x, y))
            total += torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
            n += len(y)
        total, n = ctx.sum([total, n])
        return {"mse": total / max(n, 1)}

    def checkpoint_meta(self):
        return {"model": "linear"}


def test_minimal_task_trains_and_writes_the_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "regress"
    config = RunConfig(output=str(out), epochs=5, lr=0.05, opt="sgd", weight_decay=0.0, batch_size=32, progress=False)
    summary = fit(Regress(), config)
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4, 5]
    first, last = float(rows[0]["val_mse"]), float(rows[-1]["val_mse"])
    assert last < 0.1 * first  # y = sum(x) is linear: SGD fits it
    assert summary["best_metric"] == "mse" and summary["best"] == min(float(r["val_mse"]) for r in rows)
    assert read_meta(out / "best")["val_mse"] == summary["best"] and read_meta(out / "last")["epoch"] == 5
    assert json.loads((out / "config.json").read_text())["opt"] == "sgd"


def test_threads_hold_for_the_run_and_are_given_back(tmp_path: Path) -> None:
    seen: list[int] = []

    class CountThreads(Regress):
        def train_step(self, model, batch):
            seen.append(torch.get_num_threads())
            return super().train_step(model, batch)

    before = torch.get_num_threads()
    run = RunConfig(output=str(tmp_path / "r"), epochs=1, batch_size=32, lr=0.1, opt="sgd", threads=1, progress=False)
    fit(CountThreads(), run)
    assert seen and set(seen) == {1} and torch.get_num_threads() == before
    assert json.loads((tmp_path / "r" / "config.json").read_text())["threads"] == 1
    with pytest.raises(ValueError, match=r"threads \(--threads\) must be an integer in \[1, 1024\], got 0"):
        fit(CountThreads(), RunConfig(output=str(tmp_path / "bad"), threads=0))


class _Jittered(Regress):
    """Regress whose training inputs get noise from Python's ``random`` (as timm's augmentations draw), and whose
    data sets may draw from ``random`` while they are built (as scikit-learn does when it is first imported)."""

    def __init__(self, draws_while_building: int) -> None:
        super().__init__()
        self.draws = draws_while_building

    def datasets(self):
        for _ in range(self.draws):
            random.random()
        return super().datasets()

    def train_step(self, model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model(x + random.gauss(0.0, 0.5)), y), {}


def test_the_training_draws_do_not_depend_on_what_building_the_data_drew(tmp_path: Path) -> None:
    """The demo's result changed with the import order: scikit-learn, imported on first use while the data sets were
    built, drew from ``random`` after the seed was set, so a process that had imported it already trained otherwise."""
    losses = []
    for draws in (0, 3):
        out = tmp_path / f"draws{draws}"
        config = RunConfig(output=str(out), epochs=2, lr=0.05, opt="sgd", batch_size=32, progress=False, seed=4)
        fit(_Jittered(draws), config)
        losses.append([r["train_loss"] for r in csv.DictReader(open(out / "metrics.csv"))])
    assert losses[0] == losses[1]
