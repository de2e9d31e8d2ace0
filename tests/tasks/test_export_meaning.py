"""Issue 55, items 3 and 5: a hub export (and ``RUN/best``) that transformers reads, with a model card, ordinary file
modes and the right tags; ONNX and ``.pt2`` exports that carry the
class names and the preprocessing, read back here with onnx / onnxruntime and ``torch.export.load``."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import timm
import torch
import transformers
from PIL import Image

from pdevision.engine.save import save_checkpoint
from pdevision.tasks.classify.predict import predict_images
from pdevision.tasks.export import PT2_METADATA, export_checkpoint

CLASSES = ["cat", "dog", "eel"]
META = {
    "model": "pderesnet_micro",
    "kind": "classify",
    "classes": CLASSES,
    "model_args": {},
    "img_size": 32,
    "mean": [0.5, 0.4, 0.3],
    "std": [0.2, 0.25, 0.3],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as the loop leaves it (random weights): config.json, summary.json and best/."""
    run = tmp_path_factory.mktemp("meaning") / "run"
    torch.manual_seed(0)
    save_checkpoint(run, "best", timm.create_model("pderesnet_micro", num_classes=3), META)
    (run / "config.json").write_text(json.dumps({"task": "classify", "data": "data/pets", "epochs": 7}))
    summary = {"best_metric": "top1", "best": 91.25, "best_row": {"epoch": 6, "top1": 91.25, "loss": 0.31}}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three photos of random pixels, square and not (each pipeline resizes them its own way)."""
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(32, 32), (40, 56), (61, 37)]):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return sorted(folder.iterdir())


def test_transformers_loads_the_hub_export_and_run_best_as_pdevision_predicts(
    run: Path, images: list[Path], tmp_path: Path, no_network: list[tuple]
) -> None:
    """transformers' ``AutoModelForImageClassification`` and ``pipeline`` (its timm wrapper: ``timm.create_model
    (architecture, num_classes=num_labels, **model_args)``, a ``num_classes`` in ``model_args`` was 'got multiple
    values') read the export and ``RUN/best`` offline: the same logits as timm, the same classes and probabilities as
    ``pdevision predict``, and the model card's Python runs as written."""
    out = tmp_path / "hub"
    export_checkpoint(run, "hub", out)
    reference = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    ours = predict_images(run, images, topk=3, device="cpu")
    x = torch.randn(2, 3, 32, 32)
    for folder in (out, run / "best"):
        model = transformers.AutoModelForImageClassification.from_pretrained(folder).eval()
        assert model.config.id2label == dict(enumerate(CLASSES))
        with torch.no_grad():
            assert torch.allclose(model(x).logits, reference(x), atol=1e-6)
        classify = transformers.pipeline("image-classification", model=str(folder), top_k=3)
        theirs = classify([str(p) for p in images])
        for mine, their in zip(ours, theirs, strict=True):
            assert their[0]["label"] == mine["top"][0][0]
            assert {t["label"]: t["score"] for t in their} == pytest.approx(dict(mine["top"]), abs=1e-5)
    card = (out / "README.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", card, flags=re.S):
        exec(block.replace("PATH/TO/THIS/FOLDER", str(out)).replace('  # or "hf-hub:USER/REPO"', ""), {})
    assert no_network == []


def test_the_hub_export_has_a_model_card_ordinary_modes_and_its_training_tags(run: Path, tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        export_checkpoint(run, "hub", tmp_path / "hub")
    finally:
        os.umask(umask)
    out = tmp_path / "hub"
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()} == {
        "config.json": 0o644,
        "model.safetensors": 0o644,
        "README.md": 0o644,
    }
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    card = (out / "README.md").read_text()
    assert "pip install pdevision" in card and "import pdevision" in card
    assert card.index("import pdevision") < card.index("timm.create_model")
    assert "data/pets" in card and "best top1: 91.25" in card and "cat, dog, eel" in card
    assert "- trained" in card
    everything = card + (out / "config.json").read_text()
    assert "untrained" not in everything
    metrics = card[card.index("## Training data and metrics") :]
    assert "- epochs: 7" in metrics and "- epoch (best epoch): 6" in metrics and "loss" not in metrics


def test_the_export_command_says_only_what_pdevision_says(run: Path, tmp_path: Path) -> None:
    """timm's own INFO line on reading the weights back ("Loaded ... from checkpoint") is not printed: the command's
    stderr holds the library's lines alone."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    cmd = [sys.executable, "-m", "pdevision.cli", "export", str(run), "--format", "hub"]
    done = subprocess.run([*cmd, "--output", str(tmp_path / "hub")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hub" / "model.safetensors").is_file()
    assert "Loaded" not in done.stderr and "from checkpoint" not in done.stderr


def test_a_checkpoint_from_outside_a_run_is_not_tagged_trained(tmp_path: Path) -> None:
    """A checkpoint of no run (nothing says how it was made): tagged ``exported``, no data or metrics; one of a run
    still training (no summary yet): ``trained``, with its epoch and the embedded set its metadata names."""
    bare = save_checkpoint(tmp_path / "bare", "weights", timm.create_model("pderesnet_micro", num_classes=3), META)
    export_checkpoint(bare, "hub", tmp_path / "bare-hub")
    card = (tmp_path / "bare-hub" / "README.md").read_text()
    assert "- exported" in card and "- trained" not in card and "Training data" not in card
    run = tmp_path / "running"
    meta = {**META, "epoch": 2, "data": "digits"}
    save_checkpoint(run, "last", timm.create_model("pderesnet_micro", num_classes=3), meta)
    (run / "config.json").write_text(json.dumps({"task": "classify", "data": None, "epochs": 9}))
    export_checkpoint(run / "last", "hub", tmp_path / "running-hub")
    card = (tmp_path / "running-hub" / "README.md").read_text()
    assert "- trained" in card and "- data: digits" in card and "- this checkpoint: last, after epoch 2" in card


def test_onnx_carries_class_names_and_preprocessing(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.onnx"
    export_checkpoint(run, "onnx", out)
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(props["class_names"]) == CLASSES
    assert json.loads(props["mean"]) == META["mean"] and json.loads(props["std"]) == META["std"]
    assert json.loads(props["input_size"]) == [3, 32, 32]
    assert props["interpolation"] == "bicubic" and json.loads(props["crop_pct"]) == 1.0
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_modelmeta().custom_metadata_map == props


def test_pt2_carries_the_same_in_its_archive(run: Path, tmp_path: Path) -> None:
    onnx_out, pt2_out = tmp_path / "model.onnx", tmp_path / "model.pt2"
    export_checkpoint(run, "onnx", onnx_out)
    export_checkpoint(run, "pt2", pt2_out)
    extra = {PT2_METADATA: ""}
    torch.export.load(str(pt2_out), extra_files=extra)
    assert json.loads(extra[PT2_METADATA]) == {p.key: p.value for p in onnx.load(str(onnx_out)).metadata_props}
