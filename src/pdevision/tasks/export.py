"""``pdevision export``: a checkpoint (any format :mod:`pdevision.engine.formats` reads) as an ONNX file, a
``torch.export`` program (``.pt2``) or a timm / Hugging Face folder, each checked against PyTorch after it is
written; ``--int8`` adds dynamic int8 quantization with the accuracy on the checkpoint's validation data before and
after.

* ``onnx``: ``torch.onnx.export`` (a dynamic batch; with ``--dynamic`` height and width too), checked with
  onnxruntime at the checkpoint's size (with ``--dynamic``: traced and checked at twice the total stride at least,
  and at a second, non-square size); ``--int8``: onnxruntime's ``quantize_dynamic`` (int8 weights of the MatMul /
  Gemm nodes), the output is the quantized file.
* ``pt2``: ``torch.export.export`` then ``torch.export.save``, loaded back and checked. ``--int8`` is refused:
  ``torch.export`` cannot trace ``torch.ao`` dynamic-quantized linears (their packed parameters have no
  ``__obj_flatten__``).
* ``hub``: ``timm.models.save_for_hf`` (``config.json`` with the class names, ``model.safetensors``), loaded back with
  ``timm.create_model("local-dir:...")`` and checked; the folder is what ``huggingface_hub.upload_folder`` publishes.
  ``--int8``: ``torch.ao.quantization.quantize_dynamic`` of the linears, applied when the model is loaded (the folder
  keeps float weights, which is what timm reads); its accuracy is measured here.

An existing output is never overwritten.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
from torch import nn

from pdevision._optional import MissingDependencyError
from pdevision.data import build_datasets, eval_transform_for
from pdevision.data.embedded import embedded_classes
from pdevision.engine import formats
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import load_checkpoint_model, min_input_size, model_from_meta
from pdevision.errors import UsageError
from pdevision.tasks.classify.evaluate import run_data

__all__ = ["EXPORT_FORMATS", "add_export_arguments", "export_checkpoint", "quantize_linears", "run_export"]

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("onnx", "pt2", "hub")
_SUFFIX = {"onnx": ".onnx", "pt2": ".pt2", "hub": ""}


def _need(module: str) -> Any:
    """``import module``, or one line naming what to install (the ONNX packages are in no extra of their own yet)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise MissingDependencyError(
            f"{module.partition('.')[0]} is not installed; run: pip install onnx onnxruntime onnxscript"
        ) from None


def quantize_linears(model: nn.Module) -> nn.Module:
    """``torch.ao.quantization.quantize_dynamic`` of ``model``'s linear layers to int8 (a copy; CPU)."""
    with warnings.catch_warnings():  # torch.ao's notice that eager quantization moves to torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=False)


def _build(meta: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    classes = formats.label_names(meta) if meta.get("kind") != "encoder" else []
    return model_from_meta(meta, len(classes))


def _sizes(size: int, dynamic: bool) -> list[tuple[int, int]]:
    return [(size, size), (size + 32, size + 16)] if dynamic else [(size, size)]


def _ort_session(path: Path) -> Any:
    ort = _need("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _export_onnx(model: nn.Module, x: torch.Tensor, path: Path, dynamic: bool) -> None:
    _need("onnx")
    image = {0: "batch", 2: "height", 3: "width"} if dynamic else {0: "batch"}  # the batch is always free
    axes = {"image": image, "output": {0: "batch"}}
    with warnings.catch_warnings():  # the TorchScript-based exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), str(path), input_names=["image"], output_names=["output"], dynamic_axes=axes, dynamo=False
        )


def _export_pt2(model: nn.Module, x: torch.Tensor, path: Path, dynamic: bool) -> None:
    dim = torch.export.Dim.DYNAMIC
    shapes = ({0: dim, 2: dim, 3: dim},) if dynamic else ({0: dim},)  # the batch is always free
    program = torch.export.export(model, (x,), dynamic_shapes=shapes)
    torch.export.save(program, str(path))


def _val_set(meta: dict[str, Any], source: str | None, val_split: float) -> Any:
    if source is None:
        raise UsageError("--int8 reports accuracy on the checkpoint's validation data: name it with --data")
    known = embedded_classes(source)
    if known is not None:  # before the set is drawn: minutes for Pathfinder
        _check_classes(meta, known)
    tf = eval_transform_for(meta)
    _, val = build_datasets(source, int(meta["img_size"]), val_split, tf, tf)
    _check_classes(meta, list(val.classes))
    return val


def _check_classes(meta: dict[str, Any], data_classes: list[str]) -> None:
    classes = formats.label_names(meta)
    if meta.get("classes") and data_classes != classes:
        raise CheckpointError(f"the checkpoint's classes {classes[:10]} are not the data's {data_classes[:10]}")
    if len(data_classes) != len(classes):
        raise CheckpointError(f"the checkpoint has {len(classes)} classes, the data {len(data_classes)}")


def _top1(run: Any, val_set: Any, batch_size: int = 32) -> float:
    """Top-1 (%) of ``run`` (images as an NCHW float32 tensor -> logits as a numpy array) over ``val_set``."""
    correct, n = 0, 0
    loader = torch.utils.data.DataLoader(val_set, batch_size=batch_size)
    for images, labels in loader:
        logits = np.asarray(run(images))
        correct += int((logits.argmax(1) == labels.numpy()).sum())
        n += len(labels)
    return 100.0 * correct / max(n, 1)


def _check_output(fmt: str, output: Path, int8: bool) -> None:
    """Refuse, before anything is loaded, an output that exists, has no folder, or does not suit the format."""
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    if output.exists() or output.is_symlink():
        raise UsageError(f"{output} exists; export never overwrites a file or folder: give another --output")
    if not output.parent.is_dir():
        raise UsageError(f"the folder of --output {output} does not exist")
    if int8 and fmt == "pt2":
        raise UsageError(
            "--int8 with --format pt2: torch.export cannot trace torch.ao dynamic-quantized linears; use --format onnx "
            "--int8 (onnxruntime) or --format hub --int8 (quantised when loaded)"
        )
    if fmt == "pt2" and output.suffix != ".pt2":
        raise UsageError(f"--output {output}: a torch.export program is a .pt2 file (torch.export.load reads no other)")
    other = {s: f for f, s in _SUFFIX.items() if s and f != fmt}.get(output.suffix.lower())
    if other is not None:  # an ONNX file named .pt2, a folder named .onnx: the name would say another format
        raise UsageError(f"--output {output}: {output.suffix} names the {other} format, not {fmt}; give another name")


def _differences(run: Callable[[torch.Tensor], np.ndarray], model: nn.Module, x: torch.Tensor, dynamic: bool) -> dict:
    """The largest absolute difference from ``model`` of the written program ``run``, per checked size."""
    checks = {}
    for h, w in _sizes(x.shape[-1], dynamic):
        xi = torch.randn(2, x.shape[1], h, w)
        checks[f"{h}x{w}"] = float(np.abs(run(xi) - model(xi).numpy()).max())
    return checks


def _write_onnx(model: nn.Module, x: torch.Tensor, output: Path, dynamic: bool, val_set: Any) -> dict[str, Any]:
    """ONNX (onnxruntime's dynamic int8 when ``val_set`` is given), checked in onnxruntime."""
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "model.onnx"
        _export_onnx(model, x, written, dynamic)
        result: dict[str, Any] = {"float_bytes": written.stat().st_size}
        if val_set is not None:
            quantization = _need("onnxruntime.quantization")
            fp32, written = written, Path(tmp) / "model.int8.onnx"
            logging.disable(logging.WARNING)  # onnxruntime logs a line per tensor it leaves in float
            try:
                quantization.quantize_dynamic(str(fp32), str(written), weight_type=quantization.QuantType.QInt8)
            finally:
                logging.disable(logging.NOTSET)
        session = _ort_session(written)
        run = lambda b: session.run(None, {"image": b.numpy()})[0]  # noqa: E731
        result["max_abs_diff"] = _differences(run, model, x, dynamic)
        if val_set is not None:
            result["top1_before"] = _top1(lambda b: model(b).numpy(), val_set)
            result["top1_after"] = _top1(run, val_set)
        output.write_bytes(written.read_bytes())
    return result


def _write_pt2(model: nn.Module, x: torch.Tensor, output: Path, dynamic: bool) -> dict[str, Any]:
    """A ``torch.export`` program, loaded back and checked."""
    _export_pt2(model, x, output, dynamic)
    loaded = torch.export.load(str(output)).module()
    return {"max_abs_diff": _differences(lambda b: loaded(b).numpy(), model, x, dynamic)}


def _write_hub(
    model: nn.Module, meta: dict[str, Any], x: torch.Tensor, output: Path, dynamic: bool, val_set: Any
) -> dict[str, Any]:
    """timm's ``save_for_hf`` folder, read back with ``local-dir:``; with ``val_set``, torch.ao's dynamic int8 of the
    loaded model measured (the folder keeps the float weights timm reads)."""
    config = {"label_names": formats.label_names(meta)} if model.num_classes else {}
    timm.models.save_for_hf(model, output, model_config=config, safe_serialization=True)
    loaded = timm.create_model(f"local-dir:{output}", pretrained=True).eval()
    result: dict[str, Any] = {"max_abs_diff": _differences(lambda b: loaded(b).numpy(), model, x, dynamic)}
    if val_set is not None:
        quantized = quantize_linears(loaded)
        result["max_abs_diff"]["int8"] = float((quantized(x) - model(x)).abs().max())
        result["top1_before"] = _top1(lambda b: model(b).numpy(), val_set)
        result["top1_after"] = _top1(lambda b: quantized(b).numpy(), val_set)
    return result


def export_checkpoint(
    checkpoint: str | Path,
    fmt: str,
    output: str | Path,
    int8: bool = False,
    dynamic: bool = False,
    data: str | None = None,
    val_split: float = 0.2,
) -> dict[str, Any]:
    """Write ``checkpoint`` as ``fmt`` to ``output`` and check it against PyTorch; returns what was measured
    (``max_abs_diff`` per checked size, sizes in bytes, top-1 before and after with ``int8``)."""
    output = Path(output)
    _check_output(fmt, output, int8)
    model, meta, folder = load_checkpoint_model(checkpoint, ("classify", "encoder"), _build)  # plain: no CPU kernels
    if int8:  # the run's own data unless --data names other data
        data, val_split = run_data(folder, meta, data, val_split)
    val_set = _val_set(meta, data, val_split) if int8 else None
    size = int(meta["img_size"])
    if size < min_input_size(model):  # traced, the model's own message would show the shape as tensors
        raise CheckpointError(
            f"checkpoint {checkpoint}: its image size {size} px is below the {min_input_size(model)} px that "
            f"{meta.get('model')} takes at least; it cannot be exported at that size"
        )
    # a dynamic graph is traced at twice the total stride at least: a 1x1 last stage would fix the sizes
    trace = max(size, 2 * min_input_size(model)) if dynamic else size
    x = torch.randn(2, int(meta.get("model_args", {}).get("in_chans", 3)), trace, trace)
    result: dict[str, Any] = {"format": fmt, "output": str(output), "model": meta.get("model"), "int8": int8}
    with torch.no_grad():
        if fmt == "onnx":
            result.update(_write_onnx(model, x, output, dynamic, val_set))
        elif fmt == "pt2":
            result.update(_write_pt2(model, x, output, dynamic))
        else:
            result.update(_write_hub(model, meta, x, output, dynamic, val_set))
    files = output.rglob("*") if output.is_dir() else [output]
    result["bytes"] = sum(f.stat().st_size for f in files if f.is_file())
    return result


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", type=V.path, help="run or checkpoint folder, timm / HF folder, .pth.tar or .pth")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="onnx, pt2 (torch.export) or hub (timm)")
    p.add_argument("--output", required=True, type=V.path, help="the file (onnx, pt2) or folder (hub); never replaced")
    p.add_argument("--int8", action="store_true", help="dynamic int8 quantization, accuracy before and after")
    p.add_argument("--dynamic", action="store_true", help="dynamic batch, height and width (onnx, pt2)")
    p.add_argument("--data", type=V.path, default=None, help="validation data for --int8 (default: the run's)")
    p.add_argument("--val-split", type=V.open_fraction, default=0.2, help="validation fraction of a single folder")


def run_export(args: argparse.Namespace) -> tuple[str, int]:
    r = export_checkpoint(args.checkpoint, args.format, args.output, args.int8, args.dynamic, args.data, args.val_split)
    diffs = ", ".join(f"{k} {v:.2e}" for k, v in r["max_abs_diff"].items())
    line = f"{r['model']} -> {r['output']} ({r['format']}, {r['bytes'] / 1e6:.2f} MB); "
    line += f"largest difference to PyTorch: {diffs}"
    if "float_bytes" in r and r["int8"]:
        line += f"; float file {r['float_bytes'] / 1e6:.2f} MB"
    if r["int8"]:
        line += f"\nint8: top-1 {r['top1_before']:.2f}% before, {r['top1_after']:.2f}% after on the validation data"
    return line, 0
