"""A core install (no scikit-learn) trains and evaluates an ImageFolder that has ``train/`` and ``val/``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pdevision.cli import main
from pdevision.tasks.classify.evaluate import confusion_matrix


def test_confusion_matrix_matches_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    targets, preds = rng.integers(0, 7, 500), rng.integers(0, 7, 500)
    expected = metrics.confusion_matrix(targets, preds, labels=list(range(9)))  # two classes never seen
    np.testing.assert_array_equal(confusion_matrix(targets, preds, 9), expected)


def _folder(root: Path, splits: tuple[str, ...]) -> Path:
    rng = np.random.default_rng(0)
    for split in splits:
        for c, name in enumerate(("dark", "light")):
            (root / split / name).mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 100, (32, 32, 3)) + 150 * c
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture
def no_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    """scikit-learn as if it were not installed: every import of it fails."""
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)


def test_train_and_eval_an_image_folder_without_scikit_learn(
    tmp_path: Path, no_sklearn: None, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = _folder(tmp_path / "data", ("train", "val")), tmp_path / "run"
    argv = ["train", "--data", str(data), "--img-size", "32", "--epochs", "1", "--batch-size", "4"]
    assert main([*argv, "--no-progress", "--output", str(run)]) == 0, capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(run), "--data", str(data)]) == 0, capsys.readouterr().err
    result = json.loads((run / "eval-best" / "eval.json").read_text())
    assert result["images"] == 8 and np.asarray(result["confusion_matrix"]).sum() == 8
    assert "sklearn" not in sys.modules or sys.modules["sklearn"] is None


def test_one_folder_to_split_names_the_extra_without_scikit_learn(
    tmp_path: Path, no_sklearn: None, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _folder(tmp_path / "data", ("all",)) / "all"  # one tree: split into train and val by scikit-learn
    argv = ["train", "--data", str(data), "--img-size", "32", "--epochs", "1", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'scikit-learn is not installed; run: pip install "pdevision[train]"' in err[0], err
