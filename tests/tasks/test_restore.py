"""Restoration tasks on the fit loop, whole-image restore (tiles, sizes, modes) and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from pdevision.cli import main
from pdevision.data.restoration import Degradation, embedded_images, psnr, restoration_images
from pdevision.tasks.restore import (
    HeldOutImages,
    load_restoration_model,
    parse_sigma,
    restore_file,
    restore_image,
)

TINY = {"embed_dim": 8, "depths": [1]}


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    """A folder of small real photo crops (train/ and test/)."""
    root = tmp_path_factory.mktemp("photos")
    images = embedded_images("RGB")
    for split, names in (("train", images.train[:2]), ("test", images.test[:1])):
        (root / split).mkdir()
        for i, name in enumerate(names):
            arr = (images.load(name)[:40, :56] * 255).astype(np.uint8)
            Image.fromarray(arr).save(root / split / f"{i}.png")
    return str(root)


@pytest.fixture(scope="module")
def run(photos, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("runs") / "denoise"
    code = main(
        ["train", "--task", "denoise", "--sigma", "25", "--data", photos, "--patch-size", "16", "--model-args",
         json.dumps(TINY), "--patches-per-epoch", "16", "--batch-size", "8", "--epochs", "2", "--baselines", "noisy",
         "nlm", "--output", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    return str(out)


def test_train_denoise_writes_summary_with_baselines(run) -> None:
    with open(f"{run}/summary.json") as f:
        summary = json.load(f)
    assert summary["task"] == "denoise" and summary["epochs_run"] == 2
    assert set(summary["baselines"]) == {"noisy", "nlm"}
    assert 19 < summary["baselines"]["noisy"] < 22  # sigma 25 on 8-bit: about 20.2 dB
    assert np.isfinite(summary["best_val_psnr"]) and 0 < summary["best_val_ssim"] <= 1


def test_checkpoint_round_trip_restores_identically(run, photos) -> None:
    model, meta = load_restoration_model(f"{run}/best")
    assert meta["task"] == "denoise" and meta["in_chans"] == 1
    again, _ = load_restoration_model(run)  # a run folder resolves to best/
    x = torch.rand(1, 1, 23, 31)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    # the stored model scores the held-out PSNR that the run recorded for best/
    images = restoration_images(photos, mode="L")
    degraded, clean = HeldOutImages(images, Degradation("noise", 25.0)).pair(0)

    with open(f"{run}/summary.json") as f:
        best = json.load(f)["best_val_psnr"]
    assert psnr(clean, restore_image(model, degraded)) == pytest.approx(best, abs=1e-6)


def test_tiles_blend_to_the_whole_image_result() -> None:
    model = torch.nn.Conv2d(3, 3, 1).eval()  # pointwise: tiles must reproduce the whole image exactly
    img = np.random.default_rng(0).random((70, 45, 3), dtype=np.float32) * 0.5
    whole = restore_image(model, img, tile=None)
    tiled = restore_image(model, img, tile=32, overlap=8)
    np.testing.assert_allclose(tiled, whole, atol=1e-6)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA"])
def test_restore_keeps_odd_size_and_mode(run, tmp_path, mode) -> None:
    rng = np.random.default_rng(0)
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    arr = rng.integers(0, 255, (33, 47, channels), dtype=np.uint8)
    src, dst = tmp_path / "in.png", tmp_path / "out.png"
    Image.fromarray(arr[..., 0] if channels == 1 else arr, mode=mode).save(src)
    r = restore_file(run, src, dst, tile=24, overlap=4)
    out = Image.open(dst)
    assert out.size == (47, 33) and out.mode == mode and r["tiled"]
    if mode.endswith("A"):
        assert np.array_equal(np.asarray(out)[..., -1], arr[..., -1])  # alpha kept


def test_restore_cli_errors_are_one_line(run, tmp_path, capsys) -> None:
    Image.new("P", (9, 9)).save(tmp_path / "pal.png")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    Image.new("L", (9, 9)).save(tmp_path / "ok.png")
    cases = [
        [str(tmp_path / "pal.png"), str(tmp_path / "o.png")],
        [str(tmp_path / "bad.png"), str(tmp_path / "o.png")],
        [str(tmp_path / "missing.png"), str(tmp_path / "o.png")],
        [str(tmp_path / "ok.png"), str(tmp_path / "o.unknownext")],
    ]
    for args in cases:
        assert main(["restore", "--checkpoint", f"{run}/best", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("pdevision restore: error:") and "\n" not in err
    assert main(["restore", "--checkpoint", str(tmp_path), str(tmp_path / "ok.png"), str(tmp_path / "o.png")]) == 2
    assert main(["restore", "--checkpoint", f"{run}/best", str(tmp_path / "ok.png"), str(tmp_path / "o.png")]) == 0
    assert "9x9 L" in capsys.readouterr().out


def test_train_task_flags_reject_bad_values(capsys) -> None:
    assert parse_sigma("25") == 25.0 and parse_sigma("0-55") == (0.0, 55.0)
    assert main(["train", "--task", "denoise", "--sigma", "abc"]) == 2  # one-line error, no traceback
    assert "sigma must be a number" in capsys.readouterr().err
    for bad in (["--task", "deblur"], ["--task", "denoise", "--loss", "l2"]):
        with pytest.raises(SystemExit) as exc:
            main(["train", *bad])
        assert exc.value.code == 2
        assert "error" in capsys.readouterr().err
