"""Restoration data: metrics against independent references, seeded degradations, patches, folders, baselines."""

from __future__ import annotations

import io

import numpy as np
import pytest
import skimage.data
import torch
from PIL import Image
from scipy.ndimage import gaussian_filter

from pdevision.data.datasets import DataError
from pdevision.data.restoration import (
    EMBEDDED_TEST,
    EMBEDDED_TRAIN,
    Degradation,
    PatchDataset,
    classical_baselines,
    embedded_images,
    folder_images,
    psnr,
    quantize,
    ssim,
)


def _camera_crop() -> np.ndarray:
    return (skimage.data.camera()[120:216, 180:300].astype(np.float32) / 255.0)[..., None]


def _reference_psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / mse)


def _reference_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Wang et al. (2004) with an 11-tap Gaussian window (sigma 1.5), borders of the window cropped."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    f = lambda x: gaussian_filter(x, 1.5, truncate=3.5)  # noqa: E731
    mu_a, mu_b = f(a), f(b)
    va, vb, cov = f(a * a) - mu_a**2, f(b * b) - mu_b**2, f(a * b) - mu_a * mu_b
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (va + vb + c2))
    return float(s[5:-5, 5:-5].mean())


def test_psnr_and_ssim_grey_against_independent_references() -> None:
    clean = _camera_crop()
    noisy = Degradation("noise", 25.0).apply(clean, 0)
    a, b = quantize(clean)[..., 0], quantize(noisy)[..., 0]
    assert psnr(clean, noisy) == pytest.approx(_reference_psnr(a, b), abs=1e-9)
    assert ssim(clean, noisy) == pytest.approx(_reference_ssim(a, b), abs=1e-4)
    assert ssim(clean, clean) == pytest.approx(1.0)
    assert psnr(clean, clean) == float("inf")


def test_colour_metrics_are_on_bt601_luma() -> None:
    clean = skimage.data.chelsea()[:96, :128].astype(np.float32) / 255.0
    noisy = Degradation("noise", 15.0).apply(clean, 3)

    def luma(x: np.ndarray) -> np.ndarray:
        q = quantize(x).astype(np.float64) / 255.0
        return 16.0 + 65.481 * q[..., 0] + 128.553 * q[..., 1] + 24.966 * q[..., 2]

    assert psnr(clean, noisy) == pytest.approx(_reference_psnr(luma(clean), luma(noisy)), abs=1e-6)
    assert ssim(clean, noisy) == pytest.approx(_reference_ssim(luma(clean), luma(noisy)), abs=1e-4)


def test_noise_is_reproducible_with_a_seed_and_has_the_stated_level() -> None:
    clean = _camera_crop()
    deg = Degradation("noise", 25.0)
    a, b, c = deg.apply(clean, 7), deg.apply(clean, 7), deg.apply(clean, 8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.std(a - clean) * 255 == pytest.approx(25.0, rel=0.03)
    assert abs(np.mean(a - clean) * 255) < 0.5
    blind = Degradation("noise", (0.0, 55.0))
    levels = [np.std(blind.apply(clean, s) - clean) * 255 for s in range(40)]
    assert 0 <= min(levels) and max(levels) <= 56 and np.std(levels) > 5  # draws spread over the range
    assert np.array_equal(blind.apply(clean, 3), blind.apply(clean, 3))
    assert blind.eval_sigma == 25.0


def test_jpeg_is_reproducible_and_is_pillows_round_trip() -> None:
    clean = _camera_crop()
    deg = Degradation("jpeg", quality=10)
    out = deg.apply(clean, 0)
    assert np.array_equal(out, deg.apply(clean, 99))  # JPEG is deterministic
    buf = io.BytesIO()
    Image.fromarray(quantize(clean)[..., 0]).save(buf, format="JPEG", quality=10)
    ref = np.asarray(Image.open(buf), dtype=np.float32)[..., None] / 255.0
    assert np.array_equal(out, ref)
    assert psnr(clean, out) < psnr(clean, Degradation("jpeg", quality=40).apply(clean, 0))
    with pytest.raises(ValueError):
        Degradation("jpeg", quality=0)
    with pytest.raises(ValueError):
        Degradation("blur")


def test_embedded_split_is_fixed_and_disjoint() -> None:
    grey, colour = embedded_images("L"), embedded_images("RGB")
    assert not set(EMBEDDED_TRAIN) & set(EMBEDDED_TEST)
    assert grey.test == list(EMBEDDED_TEST) and len(colour.test) == 2
    img = grey.load("skimage:camera")
    assert img.shape == (512, 512, 1) and img.dtype == np.float32
    assert colour.load("sklearn:flower.jpg").shape == (427, 640, 3)


def test_patches_are_reproducible_with_torch_seed(tmp_path) -> None:
    images = embedded_images("L")
    ds = PatchDataset(images, Degradation("noise", 25.0), patch_size=24, length=8)
    torch.manual_seed(1)
    first = [ds[i] for i in range(3)]
    torch.manual_seed(1)
    again = [ds[i] for i in range(3)]
    for (x1, y1), (x2, y2) in zip(first, again, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
        assert x1.shape == y1.shape == (1, 24, 24)
    assert not torch.equal(first[0][1], first[1][1])


def test_folders_at_any_nesting(tmp_path) -> None:
    rng = np.random.default_rng(0)
    for i, sub in enumerate(["a", "a/b", "c/d/e"] * 4):
        (tmp_path / "flat" / sub).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(tmp_path / "flat" / sub / f"{i}.png")
    images = folder_images(tmp_path / "flat", mode="RGB")
    assert len(images.train) + len(images.test) == 12 and len(images.test) == 2
    assert images.load(images.test[0]).shape == (20, 30, 3)
    for split in ("train", "test"):
        (tmp_path / "split" / split / "x").mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (20, 30), dtype=np.uint8)).save(tmp_path / "split" / split / "x" / "0.png")
    images = folder_images(tmp_path / "split", mode="L")
    assert len(images.train) == len(images.test) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError):
        folder_images(tmp_path / "empty")


def test_classical_baselines_improve_on_the_noisy_input() -> None:
    clean = _camera_crop()[:64, :64]
    deg = Degradation("noise", 25.0)
    noisy = deg.apply(clean, 0)
    out = classical_baselines(clean, noisy, deg)
    assert set(out) == {"noisy", "nlm", "wavelet", "tv", "bm3d"}
    scores = {k: psnr(clean, v) for k, v in out.items()}
    for name in ("nlm", "wavelet", "tv", "bm3d"):
        assert scores[name] > scores["noisy"] + 3, scores
    assert list(classical_baselines(clean, noisy, Degradation("jpeg", quality=10))) == ["jpeg"]


def test_load_image_scales_16_bit_and_names_unreadable_files(tmp_path) -> None:
    from pdevision.data.imageio import ImageReadError
    from pdevision.data.restoration import load_image

    arr16 = np.array([[0, 16384, 32768, 65535]], dtype=np.uint16).repeat(3, 0)
    Image.fromarray(arr16).save(tmp_path / "grey16.png")
    grey = load_image(tmp_path / "grey16.png", "L")  # Pillow's own conversion would clip at 255: all white
    np.testing.assert_allclose(grey[0, :, 0], np.rint(arr16[0].astype(np.float64) * 255 / 65535) / 255, atol=1e-6)
    assert load_image(tmp_path / "grey16.png", "RGB").shape == (3, 4, 3)
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "text.jpg").write_text("not an image")
    for name in ("empty.png", "text.jpg", "missing.png"):
        with pytest.raises(ImageReadError, match=name):
            load_image(tmp_path / name, "L")


def test_degradation_refuses_non_finite_noise_and_bad_quality() -> None:
    for sigma in (float("nan"), float("inf"), -1.0, (5.0, float("inf")), (30.0, 10.0)):
        with pytest.raises(ValueError, match="sigma"):
            Degradation("noise", sigma=sigma)
    for quality in (0, 101, True):
        with pytest.raises(ValueError, match="quality"):
            Degradation("jpeg", quality=quality)
