"""WebDataset shards: streaming, splitting across loader workers, epoch-seeded order (what resume relies on),
training on shards; slow: same accuracy as the folder tree of the same images, and 2 processes under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from pdevision.data import DigitsDataset
from pdevision.data.shards import ShardDataset, is_shard_folder, shard_datasets, write_shards
from pdevision.tasks.classify import ClassifyConfig, train
from tests.helpers import make

FAST = dict(img_size=32, batch_size=32, max_train_batches=3, progress=False)


def _digits(split: str) -> list:
    data = DigitsDataset(split, img_size=32)
    return [data[i] for i in range(len(data))]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    write_shards(_digits("train"), root / "train", per_shard=400)  # 4 shards, the last one short
    write_shards(_digits("val"), root / "val", per_shard=200)
    (root / "classes.txt").write_text("\n".join(f"digit-{i}" for i in range(10)) + "\n")
    return root


def _labels(dataset: ShardDataset, workers: int = 0) -> list[int]:
    loader = DataLoader(dataset, batch_size=50, num_workers=workers)
    return [int(y) for _, ys in loader for y in ys]


def test_stream_counts_splits_across_workers_and_orders_by_epoch(shards: Path) -> None:
    assert is_shard_folder(shards) and not is_shard_folder(shards / "train")
    tf = lambda img: torch.tensor(list(img.tobytes()[:4]), dtype=torch.float32).flatten()  # noqa: E731
    train_set, val_set = shard_datasets(shards, tf, tf, seed=3, buffer=64)
    assert (train_set.count, val_set.count) == (1437, 360)
    assert train_set.classes == [f"digit-{i}" for i in range(10)] and len(list((shards / "train").glob("*.tar"))) == 4
    expected = sorted(y for _, y in _digits("val"))
    assert sorted(_labels(val_set)) == expected
    assert sorted(_labels(val_set, workers=2)) == expected  # every sample exactly once over the workers
    epoch0 = _labels(train_set)
    assert len(epoch0) == 1437 and _labels(train_set) == epoch0  # the order depends on (seed, epoch) alone
    train_set.set_epoch(1)
    epoch1 = _labels(train_set)
    assert epoch1 != epoch0 and sorted(epoch1) == sorted(epoch0)
    assert len(_labels(train_set, workers=2)) == 1437


def test_training_on_shards_and_resume_after_an_epoch(shards: Path, tmp_path: Path) -> None:
    import safetensors.torch

    common = dict(data=str(shards), epochs=2, deterministic=True, **FAST)
    summary = train(make(ClassifyConfig, **common, output=str(tmp_path / "full")))
    assert summary["classes"][0] == "digit-0" and summary["val_images"] == 360 and summary["train_images"] == 1437
    train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), stop_after_epochs=1))
    train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), resume=str(tmp_path / "part")))
    full = safetensors.torch.load_file(str(tmp_path / "full" / "last" / "model.safetensors"))
    part = safetensors.torch.load_file(str(tmp_path / "part" / "last" / "model.safetensors"))
    assert all(torch.equal(full[k], part[k]) for k in full)  # the resumed stream read the same samples


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_shards_reach_the_accuracy_of_the_same_images_as_a_folder_tree(shards: Path, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for split in ("train", "val"):
        for i, (img, label) in enumerate(_digits(split)):
            folder = root / split / f"digit-{label}"
            folder.mkdir(parents=True, exist_ok=True)
            img.save(folder / f"{i}.png")
    args = dict(epochs=2, warmup_epochs=0, img_size=32, batch_size=64, progress=False)
    tops = {}
    for name, data in (("shards", shards), ("tree", root)):
        run = make(ClassifyConfig, data=str(data), **args, output=str(tmp_path / f"run-{name}"))  # not the tree
        tops[name] = train(run)["best_val_top1"]
    print(f"best val top-1: shards {tops['shards']:.2f}%, folder tree {tops['tree']:.2f}%")
    assert tops["tree"] > 50.0  # the digits are being learnt (chance: 10%)
    assert abs(tops["shards"] - tops["tree"]) < 6.0, tops  # same data, another order: within noise


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_torchrun_two_processes_on_shards(shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]
    cmd += ["pdevision.cli", "train", "--data", str(shards), "--epochs", "1", "--output", str(out), "--device", "cpu"]
    cmd += ["--img-size", "32", "--batch-size", "32", "--max-train-batches", "4", "--no-progress", "--workers", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_identical"] is True and summary["steps"] == 4
    assert summary["val_images"] == 360 and summary["final"]["val_top1"] > 0
