"""Deployment paths: torch.compile and ONNX (onnxruntime) of the folded model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import timm
import torch
from timm.utils.model import reparameterize_model

import pdevision  # noqa: F401


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
