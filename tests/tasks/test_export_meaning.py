"""Issue 55, items 3 and 5: a hub export that transformers' timm wrapper can build (no ``num_classes`` in
``model_args``), with a model card, ordinary file modes and the right tags; ONNX and ``.pt2`` exports that carry the
class names and the preprocessing, read back here with onnx / onnxruntime and ``torch.export.load``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
import safetensors.torch
import timm
import torch

from pdevision.engine.save import save_checkpoint
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


def test_the_hub_export_passes_the_checks_of_transformers_timm_wrapper(run: Path, tmp_path: Path) -> None:
    """transformers builds ``timm.create_model(architecture, num_classes=num_labels, **model_args)`` from config.json
    and loads model.safetensors into it: a ``num_classes`` in ``model_args`` was 'got multiple values'."""
    out = tmp_path / "hub"
    export_checkpoint(run, "hub", out)
    config = json.loads((out / "config.json").read_text())
    assert "num_classes" not in config.get("model_args", {})
    assert config["num_classes"] == 3 and config["label_names"] == CLASSES
    id2label = dict(enumerate(config["label_names"]))  # transformers' id2label from label_names
    model = timm.create_model(
        config["architecture"], pretrained=False, num_classes=len(id2label), **config.get("model_args", {})
    )
    model.load_state_dict(safetensors.torch.load_file(str(out / "model.safetensors")), strict=True)
    cfg = config["pretrained_cfg"]
    assert cfg["mean"] == META["mean"] and cfg["std"] == META["std"] and cfg["input_size"] == [3, 32, 32]
    loaded = timm.create_model(f"local-dir:{out}", pretrained=True)
    assert loaded.pretrained_cfg["label_names"] == CLASSES


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
