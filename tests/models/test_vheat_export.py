"""Deployment paths: torch.compile and ONNX (onnxruntime) of the folded model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import timm
import torch
from timm.utils.model import reparameterize_model

import pdevision  # noqa: F401


@pytest.mark.slow
def test_torch_compile_matches_eager() -> None:
    model = timm.create_model("vheat_micro", num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_folded_micro_exports_to_onnx(tmp_path: Path) -> None:
    model = reparameterize_model(timm.create_model("vheat_micro", num_classes=10).eval())
    x = torch.randn(2, 3, 64, 64)
    path = tmp_path / "vheat_micro.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-4


def test_dynamic_height_width_export_of_a_model_without_fves_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A model folded without its FVEs (a folded checkpoint) runs at one size: a graph with symbolic H, W is refused
    (dynamic exports of the full model: tests/models/test_export_dynamic.py)."""
    model = timm.create_model("vheat_micro", num_classes=10).eval()
    model.reparameterize()
    for stage in model.stages:
        stage.folded_only = True
    dims = ({2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC},)
    with pytest.raises(ValueError, match="cannot be exported or compiled with a dynamic height or width"):
        torch.export.export(model, (torch.randn(1, 3, 64, 64),), dynamic_shapes=dims)
    path = tmp_path / "dyn.onnx"
    with pytest.raises(Exception, match="cannot be exported or compiled with a dynamic height or width"):
        torch.onnx.export(model, (torch.randn(1, 3, 64, 64),), str(path), dynamo=True, dynamic_shapes=dims)
    with pytest.raises(ValueError, match="cannot be exported or compiled with a dynamic height or width"):
        torch.onnx.export(model, (torch.randn(1, 3, 64, 64),), str(path), dynamo=False, dynamic_axes={"x": [2, 3]})
    assert not path.exists()  # no file that would fail at another size


@pytest.mark.slow
def test_export_per_resolution_runs_in_onnxruntime(tmp_path: Path) -> None:
    model = timm.create_model("vheat_micro", num_classes=10).eval()
    for size in (64, 96):
        path = tmp_path / f"vheat_micro_{size}.onnx"
        batch = ({0: torch.export.Dim.DYNAMIC},)  # a dynamic batch is fine
        torch.onnx.export(model, (torch.randn(2, 3, size, size),), str(path), dynamo=True, dynamic_shapes=batch)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        x = torch.randn(3, 3, size, size)
        (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            ref = model(x).numpy()
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-4
