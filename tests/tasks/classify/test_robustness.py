"""Corruption robustness (ImageNet-C corruptions through imagecorruptions): accuracies, mCE, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from pdevision.cli import main
from pdevision.data import DigitsDataset, eval_transform_for
from pdevision.data.corruptions import CORRUPTIONS, corrupt
from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.classify.robustness import (
    evaluate_corruptions,
    mean_corruption_error,
    parse_corruptions,
    parse_severities,
)

SIZE = 32
N = 8


def _checkpoint(root: Path, seed: int) -> tuple[Path, torch.nn.Module, dict]:
    torch.manual_seed(seed)
    model = create_model("vheat_micro", num_classes=10, img_size=SIZE)
    meta = {
        "model": "vheat_micro",
        "classes": [str(c) for c in range(10)],
        "img_size": SIZE,
        "model_args": {"img_size": SIZE},
        "mean": list(IMAGENET_DEFAULT_MEAN),
        "std": list(IMAGENET_DEFAULT_STD),
    }
    return save_checkpoint(root, "best", model, meta), model.eval(), meta


def test_mce_arithmetic_by_hand() -> None:
    errors = {"a": {1: 20.0, 2: 40.0}, "b": {1: 50.0}}
    base = {"a": {1: 40.0, 2: 80.0, 3: 99.0}, "b": {1: 25.0}}
    out = mean_corruption_error(errors, base)
    assert out["ce"] == pytest.approx({"a": 100 * 60 / 120, "b": 100 * 50 / 25})
    assert out["mce"] == pytest.approx((50.0 + 200.0) / 2)
    with pytest.raises(ValueError, match="baseline has no error"):
        mean_corruption_error({"c": {1: 1.0}}, base)


def test_parse_names_and_severities() -> None:
    assert parse_corruptions("all") == list(CORRUPTIONS) and parse_corruptions(None) == list(CORRUPTIONS)
    assert parse_corruptions("fog, snow") == ["fog", "snow"]
    assert parse_severities("3,1") == [1, 3] and parse_severities(None) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="unknown corruption"):
        parse_corruptions("fog,rain")
    with pytest.raises(ValueError, match="1-5"):
        parse_severities("0,6")


def test_evaluate_corruptions_accuracies_and_mce(tmp_path: Path) -> None:
    folder, model, meta = _checkpoint(tmp_path / "a", 0)
    base_folder, _, _ = _checkpoint(tmp_path / "b", 1)
    names = ["gaussian_noise", "contrast"]
    r = evaluate_corruptions(
        folder, names, [2], batch_size=8, device="cpu", baseline=base_folder, max_images=N, output=tmp_path / "out"
    )
    # clean accuracy: the checkpoint's own evaluation transform on the first N validation digits
    val = DigitsDataset("val", SIZE, eval_transform_for(meta))
    x = torch.stack([val[i][0] for i in range(N)])
    y = torch.tensor(val.targets[:N])
    with torch.no_grad():
        assert r["clean_top1"] == pytest.approx(100.0 * (model(x).argmax(1) == y).float().mean().item())
    # corrupted accuracy: the same images corrupted by hand with the same seeds
    mean, std = torch.tensor(meta["mean"])[:, None, None], torch.tensor(meta["std"])[:, None, None]
    raw = DigitsDataset("val", SIZE)  # already at the model's size: resizing and cropping are the identity
    for c in names:
        imgs = []
        for i in range(N):
            seed = int(np.random.SeedSequence([0, CORRUPTIONS.index(c), 2, i]).generate_state(1)[0])
            arr = corrupt(np.asarray(raw[i][0]), c, 2, seed)
            imgs.append((torch.from_numpy(arr).permute(2, 0, 1).float() / 255.0 - mean) / std)
        with torch.no_grad():
            acc = 100.0 * (model(torch.stack(imgs)).argmax(1) == y).float().mean().item()
        assert r["top1"][c][2] == pytest.approx(acc)
    assert r["mean_corruption_top1"] == pytest.approx(np.mean([r["top1"][c][2] for c in names]))
    # mCE by hand from the two per-corruption errors
    base = r["baseline"]["top1"]
    ce = {c: 100 * (100 - r["top1"][c][2]) / (100 - base[c][2]) for c in names}
    assert r["ce"] == pytest.approx(ce)
    assert r["mce"] == pytest.approx(np.mean(list(ce.values())))
    saved = json.loads((tmp_path / "out" / "corruptions.json").read_text())
    assert saved["mce"] == pytest.approx(r["mce"])
    # a baseline against itself (its corruptions.json reused) has mCE 100
    again = evaluate_corruptions(
        folder, names[:1], [2], batch_size=8, device="cpu", baseline=tmp_path / "out" / "corruptions.json", max_images=N
    )
    assert again["mce"] == pytest.approx(100.0) and again["top1"] == {names[0]: r["top1"][names[0]]}


def test_cli_eval_corruptions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, _ = _checkpoint(tmp_path / "a", 0)
    base, _, _ = _checkpoint(tmp_path / "b", 1)
    args = [
        "eval",
        "--checkpoint",
        str(folder),
        "--device",
        "cpu",
        "--max-images",
        "6",
        "--output",
        str(tmp_path / "o"),
    ]
    assert main([*args, "--corruptions", "fog,pixelate", "--severities", "1", "--baseline", str(base)]) == 0
    out = capsys.readouterr().out
    assert "| fog |" in out and "| pixelate |" in out and "mCE" in out
    assert main([*args, "--corruptions", "rain"]) == 2
    assert "unknown corruption" in capsys.readouterr().err
    assert main([*args, "--corruptions", "fog", "--severities", "9"]) == 2
