"""``pdevision export``: every format for a micro model of every family, checked against PyTorch (ONNX with
onnxruntime at two sizes), int8 through onnxruntime and torch.ao, and the command's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime as ort
import pytest
import timm
import torch

from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.export import export_checkpoint, quantize_linears
from tests.helpers import exit_code

FAMILIES = ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro", "pdeformer_micro"]
# torch.ao's quantize_dynamic trips on the fused-kernel code of the spectral operators (vHeat's, which WaveFormer
# and PDEformer share)
SIZE = 32
TOLERANCE = {"onnx": 1e-4, "pt2": 1e-5, "hub": 0.0}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A pdevision checkpoint of each family's micro model (random weights) for the embedded digits at 32 px."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    for name in FAMILIES:
        torch.manual_seed(0)
        model = create_model(name, num_classes=10, img_size=SIZE).eval()
        cfg = timm.data.resolve_data_config({}, model=model)
        meta = {
            "model": name,
            "kind": "classify",
            "classes": [str(i) for i in range(10)],
            "img_size": SIZE,
            "model_args": {"img_size": SIZE},
            "mean": list(cfg["mean"]),
            "std": list(cfg["std"]),
            "data": "digits",
        }
        out[name] = save_checkpoint(root / name, "best", model, meta)
    return out


# the quick cases run by default; the exports of the spectral models take 15-25 s each on a shared 2-core machine
QUICK = {("hcnet_micro", "onnx"), ("pderesnet_micro", "pt2"), ("hcnet_micro", "hub"), ("vheat_micro", "onnx")}
CASES = [
    pytest.param(n, f, marks=() if (n, f) in QUICK else pytest.mark.slow)
    for n in FAMILIES
    for f in ("onnx", "pt2", "hub")
]


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_every_format_of_every_family_matches_pytorch(
    name: str, fmt: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / f"model{'.onnx' if fmt == 'onnx' else '.pt2' if fmt == 'pt2' else ''}"
    r = export_checkpoint(checkpoints[name], fmt, output, dynamic=fmt != "hub")
    sizes = ["64x64", "96x80"] if fmt != "hub" else ["32x32"]  # dynamic graphs are traced at 64 (2x the stride)
    assert list(r["max_abs_diff"]) == sizes
    assert max(r["max_abs_diff"].values()) <= TOLERANCE[fmt], r
    if fmt == "hub":
        config = json.loads((output / "config.json").read_text())
        assert config["architecture"] == name and config["label_names"] == [str(i) for i in range(10)]
        assert (output / "model.safetensors").is_file()


def test_onnx_output_checked_independently(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """The file itself, read back here with onnxruntime, against the checkpoint's PyTorch model."""
    from pdevision.engine.modeling import load_classifier

    output = tmp_path / "m.onnx"
    export_checkpoint(checkpoints["hcnet_micro"], "onnx", output, dynamic=True)
    model, _, _ = load_classifier(checkpoints["hcnet_micro"])
    session = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 3, 40, 56)
    got = session.run(None, {"image": x.numpy()})[0]
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [pytest.param("vheat_micro", marks=pytest.mark.slow), "hcnet_micro"])
def test_onnx_int8_is_smaller_close_and_reports_accuracy(
    name: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "m.int8.onnx"
    r = export_checkpoint(checkpoints[name], "onnx", output, int8=True)
    assert r["bytes"] < 0.5 * r["float_bytes"]
    assert 0 < r["max_abs_diff"]["32x32"] < 0.1  # quantized: close, not equal
    assert 0.0 <= r["top1_before"] <= 100.0 and abs(r["top1_after"] - r["top1_before"]) <= 10.0


@pytest.mark.parametrize("name", FAMILIES)
def test_torch_ao_dynamic_quantization_of_every_family(name: str) -> None:
    torch.manual_seed(0)
    model = create_model(name, num_classes=10, img_size=SIZE).eval()
    quantized = quantize_linears(model)
    assert any("quantized" in type(m).__module__ for m in quantized.modules())
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        reference, got = model(x), quantized(x)
    assert 0 < float((got - reference).abs().max()) < 0.05 * float(reference.abs().max()) + 0.05


def test_hub_int8_reports_accuracy_before_and_after(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    r = export_checkpoint(checkpoints["hcnet_micro"], "hub", tmp_path / "hub", int8=True)
    assert 0 < r["max_abs_diff"]["int8"] < 0.1
    assert {"top1_before", "top1_after"} <= set(r)


def test_command_prints_the_differences(checkpoints: dict[str, Path], tmp_path: Path, capsys) -> None:
    argv = ["export", str(checkpoints["pderesnet_micro"]), "--format", "onnx", "--dynamic"]
    assert exit_code([*argv, "--output", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "largest difference to PyTorch: 64x64" in out and "96x80" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "pt2", "--int8", "--output", "{tmp}/m.pt2"], "torch.export cannot trace"),
        (["--format", "pt2", "--output", "{tmp}/m.onnx"], "is a .pt2 file"),
        (["--format", "onnx", "--output", "{tmp}/taken.onnx"], "never overwrites"),
        (["--format", "onnx", "--output", "{tmp}/no/such/m.onnx"], "does not exist"),
        (["--format", "tflite", "--output", "{tmp}/m"], "invalid choice"),
    ],
)
def test_bad_requests_are_one_line_exit_2(
    extra: list[str], message: str, checkpoints: dict[str, Path], tmp_path: Path, capsys
) -> None:
    taken = tmp_path / "taken.onnx"
    taken.write_bytes(b"the user's file")
    argv = ["export", str(checkpoints["hcnet_micro"]), *[a.replace("{tmp}", str(tmp_path)) for a in extra]]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) <= 2, err  # argparse prints its usage line first
    assert taken.read_bytes() == b"the user's file"
