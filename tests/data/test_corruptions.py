"""ImageNet-C corruptions through imagecorruptions (NumPy 2, current scikit-image) and the dataset wrapper
that applies them after the evaluation crop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import transforms

from pdevision.data import DigitsDataset, eval_transform_for
from pdevision.data.corruptions import CORRUPTIONS, CorruptedDataset, corrupt, split_transform

SIZE = 32


def test_corruptions_follow_imagenet_c_severities() -> None:
    grey = np.full((SIZE, SIZE, 3), 128, dtype=np.uint8)
    # Gaussian noise, severity 3: sigma 0.18 of the range
    diff = corrupt(grey, "gaussian_noise", 3, seed=0).astype(float) - 128
    assert diff.std() == pytest.approx(0.18 * 255, rel=0.1)
    # contrast, severity 3: deviations from the mean scaled by 0.2
    ramp = np.repeat(np.linspace(40, 220, SIZE)[None, :, None], SIZE, 0).repeat(3, 2).astype(np.uint8)
    out = corrupt(ramp, "contrast", 3).astype(float)
    assert out.std() == pytest.approx(0.2 * ramp.astype(float).std(), rel=0.05)
    # every corruption runs (NumPy 2, current scikit-image) and is repeatable with a seed
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    for name in CORRUPTIONS:
        a, b = corrupt(img, name, 5, seed=1), corrupt(img, name, 5, seed=1)
        assert a.shape == img.shape and a.dtype == np.uint8 and np.array_equal(a, b)
        assert not np.array_equal(a, img)
    with pytest.raises(ValueError, match="at least 32x32"):
        corrupt(img[:16, :16], "fog", 1)


def test_corrupted_dataset_crops_then_corrupts_with_a_seed_per_image() -> None:
    meta = {"img_size": SIZE, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
    spatial, to_tensor = split_transform(eval_transform_for(meta))
    base = DigitsDataset("val", 40)  # larger than the crop: the spatial steps run before the corruption
    clean = CorruptedDataset(base, spatial, to_tensor, None, 0, indices=[0, 1, 2])
    noisy = CorruptedDataset(base, spatial, to_tensor, "gaussian_noise", 3, seed=5, indices=[0, 1, 2])
    assert len(clean) == len(noisy) == 3
    x, label = noisy[1]
    assert x.shape == (3, SIZE, SIZE) and label == base.targets[1]
    arr = np.asarray(spatial(base[1][0]), dtype=np.uint8)
    seed = int(np.random.SeedSequence([5, CORRUPTIONS.index("gaussian_noise"), 3, 1]).generate_state(1)[0])
    want = to_tensor(transforms.functional.to_pil_image(corrupt(arr, "gaussian_noise", 3, seed)))
    assert torch.equal(x, want) and torch.equal(noisy[1][0], x)  # repeatable: the seed is the image's
    assert torch.equal(clean[1][0], to_tensor(transforms.functional.to_pil_image(arr)))
    assert not torch.equal(clean[1][0], x)
    with pytest.raises(ValueError, match="cannot split"):
        split_transform(transforms.Compose([transforms.Resize(SIZE)]))
