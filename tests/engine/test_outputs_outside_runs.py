"""Issue 61, item 1: no command writes inside a run folder or a checkpoint folder (refused in one line, exit 2), and a
save of ``last/`` or ``best/`` never deletes what it did not write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch

from pdevision.engine.checkpoint import read_meta
from pdevision.engine.save import save_checkpoint
from tests.helpers import exit_code

META = {"model": "vheat_micro", "kind": "classify", "classes": ["a", "b"], "model_args": {}, "img_size": 32}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as the loop leaves it: its config.json, metrics.csv and best/ and last/ checkpoints."""
    run = tmp_path_factory.mktemp("outputs") / "run"
    model = timm.create_model("vheat_micro", num_classes=2, img_size=32)
    for name in ("best", "last"):
        save_checkpoint(run, name, model, {**META, "mean": [0.5] * 3, "std": [0.5] * 3})
    (run / "config.json").write_text(json.dumps({"model": "vheat_micro"}))
    (run / "metrics.csv").write_text("epoch\n")
    return run


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{run}", "--format", "hub", "--output", "{run}/best/hub"],  # the audit's case: exit 0 before
        ["export", "{run}", "--format", "onnx", "--output", "{run}/last/model.onnx"],
        ["export", "{run}", "--format", "onnx", "--output", "{run}/model.onnx"],
        ["export", "{run}", "--format", "hub", "--output", "{run}/hub"],
        ["predict", "--checkpoint", "{run}", "--json-out", "{run}/predictions.json", "{png}"],
        ["viz", "erf", "--models", "vheat_micro", "--output", "{run}/erf"],
        ["bench", "--out", "{run}/bench"],
    ],
)
def test_an_output_inside_a_run_is_refused_in_one_line(
    run: Path, digit_png: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert exit_code([a.format(run=run, png=digit_png) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("inside the run folder" in err or "inside the checkpoint folder" in err)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written


def test_restore_into_a_run_is_refused(run: Path, digit_png: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["restore", "--checkpoint", str(run), str(digit_png), str(run / "restored.png")]) == 2
    assert "inside the run folder" in capsys.readouterr().err


def test_a_save_moves_what_it_did_not_write_aside_instead_of_deleting_it(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, "last", model, {"epoch": 1})
    (tmp_path / "last" / "hub").mkdir()  # placed by hand: the commands refuse to write there
    (tmp_path / "last" / "hub" / "notes.txt").write_text("mine")
    save_checkpoint(tmp_path, "last", model, {"epoch": 2})
    assert read_meta(tmp_path / "last")["epoch"] == 2 and not (tmp_path / "last" / "hub").exists()
    assert (tmp_path / "last-kept-1" / "hub" / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "last-kept-1" / "model.safetensors").exists()  # the save's own files are gone
    save_checkpoint(tmp_path, "last", model, {"epoch": 3})  # a plain save after it deletes nothing, keeps nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last", "last-kept-1"]
