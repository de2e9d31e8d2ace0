"""Restoration tasks on the fit loop, whole-image restore (tiles, sizes, modes) and the CLI."""

from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from pdevision.cli import main
from pdevision.data import DataError
from pdevision.data.restoration import Degradation, embedded_images, psnr, restoration_images
from pdevision.tasks.restore import (
    HeldOutImages,
    load_restoration_model,
    parse_sigma,
    restore_file,
    restore_image,
)
from tests.helpers import exit_code, make

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


@pytest.mark.parametrize("side", [(1, 1), (3, 5)])
def test_restore_of_an_image_of_a_few_pixels_keeps_its_size(run, tmp_path, side) -> None:
    """As segmentation's small images (padded for the model, cropped back): a restoration model takes them whole."""
    src, dst = tmp_path / "in.png", tmp_path / "out.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (*side, 3), dtype=np.uint8)).save(src)
    restore_file(run, src, dst, tile=512, overlap=32)
    assert Image.open(dst).size == side[::-1]


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
    assert exit_code(["train", "--task", "denoise", "--sigma", "abc"]) == 2  # one-line error, no traceback
    assert "sigma must be a number" in capsys.readouterr().err
    for bad in (
        ["--task", "deblur"],
        ["--task", "denoise", "--loss", "l2"],
        ["--task", "denoise", "--patch-size", "1"],
    ):
        with pytest.raises(SystemExit) as exc:  # --patch-size 1 failed inside numpy (a negative stride)
            main(["train", *bad])
        assert exc.value.code == 2
        assert "error" in capsys.readouterr().err
    # no noise to remove: the noisy input's PSNR was infinite and the run stopped on a "non-finite" metric
    for sigma, expected in (("0", "a fixed sigma must be above 0"), ("0-0", "high > 0")):
        assert exit_code(["train", "--task", "denoise", "--sigma", sigma]) == 2
        assert expected in capsys.readouterr().err
    with pytest.raises(ValueError, match="a fixed sigma must be above 0"):
        parse_sigma("0")
    with pytest.raises(ValueError, match="high > 0"):
        parse_sigma("0-0")


def test_a_held_out_image_smaller_than_the_ssim_window_is_named(tmp_path, capsys) -> None:
    """A 1x1 held-out image failed inside skimage's SSIM ("win_size exceeds image extent"), naming no file."""
    from pdevision.data.datasets import DataError
    from pdevision.data.restoration import restoration_images

    (tmp_path / "val").mkdir()
    Image.new("L", (1, 1)).save(tmp_path / "val" / "tiny.png")
    held = HeldOutImages(restoration_images(None, str(tmp_path / "val")), Degradation("noise", 25.0))
    with pytest.raises(DataError, match=r"held-out image .*tiny.png is 1x1; held-out images need at least 7 px"):
        held.pair(0)


# -- resume: a stopped run continues with the same state ------------------------------------------------


def _fit_denoise(photos: str, out, **loop):
    from pdevision.engine import RunConfig, fit
    from pdevision.tasks.restore import RestoreConfig, RestoreTask

    cfg = RestoreConfig(
        task="denoise",
        sigma=25.0,
        data=photos,
        patch_size=16,
        model_args=TINY,
        patches_per_epoch=16,
        baselines=("noisy",),
    )
    loop_cfg = RunConfig(
        output=str(out), epochs=3, batch_size=8, lr=2e-3, weight_decay=0.0, deterministic=True, progress=False,
        rank_seed=True, device="cpu", **loop,
    )  # fmt: skip
    return fit(RestoreTask(cfg), loop_cfg)


def test_stopped_run_resumes_with_the_same_state_and_restores_identically(photos, tmp_path, capsys) -> None:
    import csv

    import safetensors.torch

    from pdevision.engine.checkpoint import load_trainer_state, read_meta

    full = _fit_denoise(photos, tmp_path / "full")
    part = _fit_denoise(photos, tmp_path / "part", stop_after_epochs=1)
    assert part["status"] == "stopped after epoch 1 of 3" and part["steps"] == 2
    assert read_meta(tmp_path / "part" / "last")["epoch"] == 1
    assert load_trainer_state(tmp_path / "part" / "last")["num_updates"] == 2
    resumed = _fit_denoise(photos, tmp_path / "part", resume=str(tmp_path / "part"))
    # the step count, the schedule and the summary continue as if the run had never stopped
    assert resumed["status"] == full["status"] == "completed"
    assert resumed["epochs_run"] == 3 and resumed["steps"] == full["steps"] == 6
    for key in ("best_val_psnr", "best_val_ssim", "best", "baselines"):
        assert resumed[key] == full[key], key
    assert resumed["final"]["lr"] == full["final"]["lr"]
    rows = {name: list(csv.DictReader(open(tmp_path / name / "metrics.csv"))) for name in ("full", "part")}
    assert [r["epoch"] for r in rows["part"]] == ["1", "2", "3"]
    assert [r["val_psnr"] for r in rows["part"]] == [r["val_psnr"] for r in rows["full"]]
    # weights and optimizer state bitwise equal to the uninterrupted run's
    for name in ("last", "best"):
        a = safetensors.torch.load_file(str(tmp_path / "full" / name / "model.safetensors"))
        b = safetensors.torch.load_file(str(tmp_path / "part" / name / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    sa, sb = load_trainer_state(tmp_path / "full" / "last"), load_trainer_state(tmp_path / "part" / "last")
    assert sa["num_updates"] == sb["num_updates"] == 6
    opt_a, opt_b = sa["optimizer"]["state"], sb["optimizer"]["state"]
    assert opt_a.keys() == opt_b.keys() and opt_a
    for k in opt_a:
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(torch.as_tensor(opt_a[k][field]), torch.as_tensor(opt_b[k][field])), (k, field)
    assert sa["scheduler"] == sb["scheduler"]
    # the resumed checkpoint round-trips through `pdevision restore`: the same file as the full run's best/,
    # and the same pixels as the model applied in memory
    images = restoration_images(photos, mode="L")
    degraded, _ = HeldOutImages(images, Degradation("noise", 25.0)).pair(0)
    from pdevision.data.restoration import quantize

    src = tmp_path / "noisy.png"
    Image.fromarray(quantize(degraded)[..., 0]).save(src)
    outs = {}
    for name in ("full", "part"):
        dst = tmp_path / f"{name}.png"
        assert main(["restore", "--checkpoint", str(tmp_path / name / "best"), str(src), str(dst)]) == 0
        outs[name] = np.asarray(Image.open(dst))
    capsys.readouterr()
    assert np.array_equal(outs["full"], outs["part"])
    model, _ = load_restoration_model(tmp_path / "part" / "best")
    expected = quantize(restore_image(model, np.asarray(Image.open(src), dtype=np.float32)[..., None] / 255.0))
    assert np.array_equal(outs["part"], expected[..., 0])


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(photos, tmp_path) -> None:
    """A training process killed (SIGKILL) mid-run resumes from its last checkpoint and completes the run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from pdevision.engine.checkpoint import CheckpointError, read_meta

    out = tmp_path / "run"
    args = ["train", "--task", "denoise", "--data", photos, "--patch-size", "16", "--model-args", json.dumps(TINY),
            "--patches-per-epoch", "16", "--batch-size", "8", "--epochs", "12", "--baselines", "noisy",
            "--output", str(out), "--no-progress"]  # fmt: skip
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pdevision.cli", *args], env=env, stderr=subprocess.DEVNULL)
    epoch, deadline = 0, time.monotonic() + 300
    while epoch < 2 and proc.poll() is None and time.monotonic() < deadline:
        try:
            epoch = read_meta(out / "last")["epoch"]
        except CheckpointError:
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stopped = read_meta(out / "last")["epoch"]
    assert 2 <= stopped < 12, "the run was not killed mid-run"
    assert main([*args, "--resume", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs_run"] == 12 and summary["steps"] == 24
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, 13))
    assert read_meta(out / "last")["epoch"] == 12


# -- hostile inputs: one-line errors ----------------------------------------------------------------------


def _one_line_error(capsys, command: str = "restore") -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pdevision {command}: error:") and "\n" not in err, err
    return err


def test_restore_rejects_bad_files_and_checkpoints_in_one_line(run, tmp_path, capsys) -> None:
    from pdevision.engine.save import save_checkpoint

    ok = tmp_path / "ok.png"
    Image.new("RGBA", (9, 9)).save(ok)
    (tmp_path / "empty.png").write_bytes(b"")
    data = (tmp_path / "ok.png").read_bytes()
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(png, format="PNG")
    (tmp_path / "truncated.png").write_bytes(png.getvalue()[: len(png.getvalue()) // 2])
    Image.fromarray(np.full((9, 9), 0.5, dtype=np.float32)).save(tmp_path / "float.tif")
    Image.fromarray(np.full((9, 9), 70000, dtype=np.int32)).save(tmp_path / "int32.tif")
    (tmp_path / "a_file").write_bytes(data)
    (tmp_path / "folder").mkdir()
    cases = [
        ("cannot read", "empty.png", "o.png"),
        ("cannot read", "truncated.png", "o.png"),
        ("is a F image", "float.tif", "o.tif"),
        ("outside the 16-bit range", "int32.tif", "o.tif"),
        ("is a folder; restore takes one image", "folder", "o.png"),
        ("is a folder; give the output", "ok.png", "folder"),
        ("cannot write a RGBA image", "ok.png", "o.jpg"),  # JPEG has no alpha
        ("cannot write", "ok.png", "a_file/o.png"),  # the parent is a file
    ]
    for expected, src, dst in cases:
        assert main(["restore", "--checkpoint", f"{run}/best", str(tmp_path / src), str(tmp_path / dst)]) == 2
        err = _one_line_error(capsys)
        assert expected in err, (expected, err)
    # a checkpoint of another task, and a corrupt one
    save_checkpoint(tmp_path / "cls", "last", torch.nn.Linear(2, 2), {"model": "vheat_micro", "classes": ["a"]})
    bad = tmp_path / "bad"
    shutil.copytree(f"{run}/best", bad)
    (bad / "model.safetensors").write_bytes((bad / "model.safetensors").read_bytes()[:100])
    for ckpt, expected in ((tmp_path / "cls" / "last", "this takes denoise or dejpeg checkpoints"), (bad, "corrupt")):
        assert main(["restore", "--checkpoint", str(ckpt), str(ok), str(tmp_path / "o.png")]) == 2
        assert expected in _one_line_error(capsys)
    assert not (tmp_path / "o.png").exists()


def test_a_failed_restore_keeps_the_file_it_would_replace(run, tmp_path, capsys) -> None:
    """Saving straight onto the output emptied a file already there when the save failed (RGBA into JPEG)."""
    Image.new("RGBA", (9, 9)).save(tmp_path / "rgba.png")
    Image.new("RGB", (9, 9), (10, 20, 30)).save(tmp_path / "keep.jpg")
    before = (tmp_path / "keep.jpg").read_bytes()
    argv = ["restore", "--checkpoint", f"{run}/best", str(tmp_path / "rgba.png"), str(tmp_path / "keep.jpg")]
    assert main(argv) == 2
    assert "cannot write a RGBA image" in _one_line_error(capsys)
    assert (tmp_path / "keep.jpg").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.jpg", "rgba.png"]  # no temporary file left
    # in place is refused (the original would be lost), and the file is left as it was
    with pytest.raises(DataError, match="is the input image"):
        restore_file(run, tmp_path / "keep.jpg", tmp_path / "keep.jpg")
    assert (tmp_path / "keep.jpg").read_bytes() == before


def test_restore_refuses_a_fifo_instead_of_waiting_on_it(run, tmp_path, capsys) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    assert main(["restore", "--checkpoint", f"{run}/best", str(fifo), str(tmp_path / "o.png")]) == 2
    assert "is not a file" in _one_line_error(capsys)


def test_restore_keeps_16_bit_grey_at_16_bits(run, tmp_path) -> None:
    rng = np.random.default_rng(1)
    arr16 = (np.clip(rng.normal(0.5, 0.15, (29, 37)), 0, 1) * 65535).astype(np.uint16)
    Image.fromarray(arr16).save(tmp_path / "in16.png")
    Image.fromarray((arr16 / 257).round().astype(np.uint8)).save(tmp_path / "in8.png")
    r = restore_file(run, tmp_path / "in16.png", tmp_path / "out16.png")
    out16 = Image.open(tmp_path / "out16.png")
    assert out16.mode == "I;16" and out16.size == (37, 29) and r["mode"] == "I;16"
    restore_file(run, tmp_path / "in8.png", tmp_path / "out8.png")
    a = np.asarray(out16, dtype=np.float64) / 65535  # the 0-65535 scale kept (not clipped at 255)
    b = np.asarray(Image.open(tmp_path / "out8.png"), dtype=np.float64) / 255
    assert np.abs(a - b).max() < 0.02 and abs(a.mean() - arr16.mean() / 65535) < 0.05


def test_restore_of_a_16_bit_rgb_tiff_says_it_is_written_at_8_bits(
    run, tmp_path, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    """A 16-bit RGB TIFF was written back as 8-bit without a word (issue 37): Pillow, the one reader, has no 16-bit
    colour mode; the restore says so in one warning, and the result is the 8-bit image, of the input's size."""
    tifffile = pytest.importorskip("tifffile")
    rng = np.random.default_rng(2)
    arr = (np.clip(rng.normal(0.5, 0.15, (23, 31, 3)), 0, 1) * 65535).astype(np.uint16)
    tifffile.imwrite(tmp_path / "rgb16.tif", arr, photometric="rgb")
    assert main(["restore", "--checkpoint", f"{run}/best", str(tmp_path / "rgb16.tif"), str(tmp_path / "o.tif")]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("has 16-bit colour samples" in w and "written with 8 bits per channel" in w for w in warnings), warnings
    out = Image.open(tmp_path / "o.tif")
    assert out.mode == "RGB" and out.size == (31, 23)


def test_train_rejects_bad_values_and_checkpoints_in_one_line(run, photos, tmp_path, capsys) -> None:
    from pdevision.engine.save import save_checkpoint

    small = ["--data", photos, "--patch-size", "16", "--model-args", json.dumps(TINY), "--patches-per-epoch", "16",
             "--batch-size", "8", "--epochs", "1", "--baselines", "noisy", "--no-progress"]  # fmt: skip
    for sigma in ("nan", "inf", "-5", "300", "0-inf", "30-10"):
        assert exit_code(["train", "--task", "denoise", "--sigma", sigma, *small]) == 2, sigma
        assert "sigma" in _one_line_error(capsys, "train")
    for quality in ("0", "101"):
        assert exit_code(["train", "--task", "dejpeg", "--quality", quality, *small]) == 2
        assert "--quality: must be" in _one_line_error(capsys, "train")
    bad = {
        "invalid choice: 'median'": ["--baselines", "median"],
        "does not take the model arguments": ["--model-args", '{"no_such_arg": 1}'],
        "not a restoration model": ["--model", "vheat_micro"],
    }
    for expected, extra in bad.items():
        assert exit_code(["train", "--task", "denoise", *small, *extra, "--output", str(tmp_path / "x")]) == 2
        assert expected in _one_line_error(capsys, "train")
    # resuming a checkpoint of another task, or of another degradation
    save_checkpoint(tmp_path / "cls", "last", torch.nn.Linear(2, 2), {"model": "vheat_micro", "classes": ["a"]})
    args = ["train", "--task", "denoise", *small, "--output", str(tmp_path / "r")]
    assert main([*args, "--resume", str(tmp_path / "cls" / "last")]) == 2
    assert "is a classify checkpoint, not a denoise one" in _one_line_error(capsys, "train")
    assert main([*args, "--sigma", "50", "--resume", f"{run}/last"]) == 2
    err = _one_line_error(capsys, "train")
    assert "--sigma 50.0 differs from the run's 25.0" in err  # its recorded settings (engine.resume)
    # a corrupt image in the data folder is named
    broken = tmp_path / "broken"
    shutil.copytree(photos, broken)
    (broken / "train" / "zero.png").write_bytes(b"")
    assert main(["train", "--task", "denoise", *small[2:], "--data", str(broken), "--output", str(tmp_path / "b")]) == 2
    assert "zero.png" in _one_line_error(capsys, "train")


def test_init_from_starts_from_a_restoration_checkpoint_of_the_same_network(run, photos, tmp_path, capsys) -> None:
    from pdevision.tasks.restore import RestoreConfig, RestoreTask

    base = dict(task="dejpeg", quality=10, model_args=TINY, data=photos, patch_size=16, baselines=("noisy",))
    model = RestoreTask(make(RestoreConfig, **base, init_from=f"{run}/best")).create_model()
    stored, _ = load_restoration_model(f"{run}/best")
    for (name, a), b in zip(model.state_dict().items(), stored.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    fresh = RestoreTask(make(RestoreConfig, **base)).create_model()
    pairs = zip(fresh.state_dict().values(), stored.state_dict().values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)
    # other network arguments, or colour instead of grey: one line, exit 2
    wider = json.dumps({**TINY, "embed_dim": 12})
    for extra in (["--model-args", wider], ["--model-args", json.dumps(TINY), "--color"]):
        code = main(["train", "--task", "denoise", "--data", photos, "--init-from", f"{run}/best", "--output",
                     str(tmp_path / "x"), "--no-progress", *extra])  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert code == 2 and "--init-from" in err and len(err.splitlines()) == 1, err


def test_eval_and_predict_name_a_restoration_checkpoint(run, tmp_path, capsys) -> None:
    """They said "does not list its classes", which did not tell what the checkpoint was or what to use."""
    Image.new("L", (9, 9)).save(tmp_path / "ok.png")
    for argv in (["eval", "--checkpoint", str(run)], ["predict", "--checkpoint", str(run), str(tmp_path / "ok.png")]):
        assert main(argv) == 2
        assert "is a denoise checkpoint; restore images with `pdevision restore" in _one_line_error(capsys, argv[0])
