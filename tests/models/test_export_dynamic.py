"""ONNX export with a dynamic height and width: the exported vHeat (DCT bases, frequency grid and FVE resampling built
from the input's shape in the graph) runs in onnxruntime at sizes other than the export size; HcNet and PDE-ResNet
too."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import timm
import torch

import pdevision  # noqa: F401

OTHER_SIZES = [(96, 80), (45, 67), (128, 128)]  # the export size is 64x64: odd, non-square, larger


def _export(model: torch.nn.Module, path: Path, dynamo: bool) -> None:
    x = torch.randn(2, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's tracer warnings
        if dynamo:
            dim = torch.export.Dim.DYNAMIC
            torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=({0: dim, 2: dim, 3: dim},))
        else:
            axes = {"x": {0: "batch", 2: "height", 3: "width"}}
            torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes=axes)


def _check_sizes(model: torch.nn.Module, path: Path) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in OTHER_SIZES:
        x = torch.randn(1, 3, *size)
        (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            ref = model(x).numpy()
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"size {size}")


def test_vheat_legacy_onnx_export_with_dynamic_height_width_runs_at_other_sizes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vheat_micro", num_classes=10).eval()
    _export(model, tmp_path / "vheat.onnx", dynamo=False)
    _check_sizes(model, tmp_path / "vheat.onnx")


@pytest.mark.slow  # the dynamo exporter takes minutes on the 2-core machine
@pytest.mark.parametrize("folded", [False, True])
def test_vheat_dynamo_onnx_export_with_dynamic_height_width_runs_at_other_sizes(tmp_path: Path, folded: bool) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vheat_micro", num_classes=10, fve_resize="downstream" if folded else "interp").eval()
    if folded:  # folded at the export size: the graph takes the general path, which serves every size
        model.reparameterize(img_size=64)
    _export(model, tmp_path / "vheat.onnx", dynamo=True)
    _check_sizes(model, tmp_path / "vheat.onnx")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hcnet_micro", "pderesnet_micro"])
@pytest.mark.parametrize("dynamo", [False, True])
def test_hcnet_pderesnet_onnx_export_with_dynamic_height_width(tmp_path: Path, name: str, dynamo: bool) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    _export(model, tmp_path / "model.onnx", dynamo=dynamo)
    _check_sizes(model, tmp_path / "model.onnx")


@pytest.mark.slow  # inductor compiles vHeat for minutes on the 2-core machine
def test_dynamic_compile_serves_a_new_size_without_recompiling() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = timm.create_model("vheat_micro", num_classes=4).eval()
    compiled = torch.compile(model, dynamic=True)
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):  # a second size may not recompile
        for size in [(64, 64), (96, 80), (45, 67)]:
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4, msg=str(size))
