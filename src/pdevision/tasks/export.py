"""``pdevision export``: a checkpoint (any format :mod:`pdevision.engine.checkpoint` reads) as an ONNX file, a
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
* ``hub``: the folder a checkpoint folder is (``config.json`` of :func:`pdevision.engine.hub.hub_config`,
  ``model.safetensors``) with a model card ``README.md``, loaded back with ``timm.create_model("local-dir:...")`` and
  checked; the folder is what ``huggingface_hub.upload_folder`` publishes.
  ``--int8``: ``torch.ao.quantization.quantize_dynamic`` of the linears, applied when the model is loaded (the folder
  keeps float weights, which is what timm reads); its accuracy is measured here.

ONNX files carry the class names and the preprocessing (:func:`export_metadata`) in their ``metadata_props``, ``.pt2``
files in their extra file :data:`PT2_METADATA`. An existing output is never overwritten, and none is written inside a
run or checkpoint folder.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import timm
import torch
from timm.layers import to_2tuple
from torch import nn

from pdevision._files import inside_library_folder, replaced_atomically, why_not_writable
from pdevision._optional import MissingDependencyError
from pdevision.data import build_datasets, eval_transform_for
from pdevision.data.embedded import embedded_classes
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import CheckpointError, label_names
from pdevision.engine.config import Flag, setting
from pdevision.engine.hub import EVAL_CROP_PCT, EVAL_INTERPOLATION, hub_config, model_card
from pdevision.engine.modeling import load_checkpoint_model, min_input_size, model_from_meta
from pdevision.errors import UsageError
from pdevision.tasks.classify.evaluate import run_data
from pdevision.tasks.registry import Command, register_command

__all__ = [
    "EXPORT_FORMATS",
    "PT2_METADATA",
    "ExportOptions",
    "export_checkpoint",
    "export_metadata",
    "quantize_linears",
    "run_export",
]

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("onnx", "pt2", "hub")
_SUFFIX = {"onnx": ".onnx", "pt2": ".pt2", "hub": ""}
PT2_METADATA = "pdevision.json"  # the .pt2 archive's extra file of export_metadata


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
    classes = label_names(meta) if meta.get("kind") != "encoder" else []
    return model_from_meta(meta, len(classes))


def export_metadata(model: nn.Module, meta: dict[str, Any]) -> dict[str, str]:
    """What an ONNX or ``.pt2`` export carries beside its graph, as strings (ONNX's ``metadata_props``, the ``.pt2``
    archive's extra file :data:`PT2_METADATA`): the model, its class names (JSON) and the preprocessing of timm's
    ``pretrained_cfg`` (``input_size``, ``mean``, ``std`` as JSON, ``interpolation``, ``crop_pct``), the same as the
    ``config.json`` of a checkpoint folder or a hub export (:func:`pdevision.engine.hub.hub_config`)."""
    config = hub_config(model, meta) or {}
    cfg = config.get("pretrained_cfg", {})
    names = label_names(meta) if meta.get("kind") != "encoder" else []
    return {
        "model": str(meta.get("model")),
        "class_names": json.dumps(names),
        "input_size": json.dumps(list(cfg.get("input_size", ()))),
        "mean": json.dumps(list(cfg.get("mean", meta.get("mean", ())))),
        "std": json.dumps(list(cfg.get("std", meta.get("std", ())))),
        "interpolation": str(cfg.get("interpolation", EVAL_INTERPOLATION)),
        "crop_pct": json.dumps(cfg.get("crop_pct", EVAL_CROP_PCT)),
    }


def _shown(height: int, width: int) -> str:
    return f"{height} px" if height == width else f"{height} x {width} px"


def _sizes(height: int, width: int, dynamic: bool) -> list[tuple[int, int]]:
    return [(height, width), (height + 32, width + 16)] if dynamic else [(height, width)]


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


def _export_pt2(model: nn.Module, x: torch.Tensor, path: Path, dynamic: bool, extra: dict[str, str]) -> None:
    dim = torch.export.Dim.DYNAMIC
    shapes = ({0: dim, 2: dim, 3: dim},) if dynamic else ({0: dim},)  # the batch is always free
    program = torch.export.export(model, (x,), dynamic_shapes=shapes)
    torch.export.save(program, str(path), extra_files=extra)


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
    classes = label_names(meta)
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
    why = inside_library_folder(output)
    if why is not None:  # the next save of that checkpoint, or the run's training, would delete the export
        raise UsageError(f"--output {output} {why}; write beside it instead")
    why = why_not_writable(output.parent)  # before the model is loaded and traced (was an OSError after it: exit 1)
    if why is not None:
        raise UsageError(f"the folder of --output {output} cannot be written ({why}); give another --output")
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
    for h, w in _sizes(x.shape[-2], x.shape[-1], dynamic):
        xi = torch.randn(2, x.shape[1], h, w)
        checks[f"{h}x{w}"] = float(np.abs(run(xi) - model(xi).numpy()).max())
    return checks


def _write_onnx(
    model: nn.Module, meta: dict[str, Any], x: torch.Tensor, output: Path, dynamic: bool, val_set: Any
) -> dict[str, Any]:
    """ONNX (onnxruntime's dynamic int8 when ``val_set`` is given) with :func:`export_metadata` in its
    ``metadata_props``, checked in onnxruntime."""
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
        onnx = _need("onnx")
        program = onnx.load(str(written))
        onnx.helper.set_model_props(program, export_metadata(model, meta))
        onnx.save(program, str(written))
        session = _ort_session(written)
        run = lambda b: session.run(None, {"image": b.numpy()})[0]  # noqa: E731
        result["max_abs_diff"] = _differences(run, model, x, dynamic)
        if val_set is not None:
            result["top1_before"] = _top1(lambda b: model(b).numpy(), val_set)
            result["top1_after"] = _top1(run, val_set)
        output.write_bytes(written.read_bytes())
    return result


def _write_pt2(model: nn.Module, meta: dict[str, Any], x: torch.Tensor, output: Path, dynamic: bool) -> dict[str, Any]:
    """A ``torch.export`` program with :func:`export_metadata` as the archive's extra file :data:`PT2_METADATA`
    (``torch.export.load(path, extra_files={PT2_METADATA: ""})`` reads it back), loaded back and checked."""
    _export_pt2(model, x, output, dynamic, {PT2_METADATA: json.dumps(export_metadata(model, meta))})
    loaded = torch.export.load(str(output)).module()
    return {"max_abs_diff": _differences(lambda b: loaded(b).numpy(), model, x, dynamic)}


def _write_hub(
    model: nn.Module, meta: dict[str, Any], x: torch.Tensor, output: Path, dynamic: bool, val_set: Any, card: str
) -> dict[str, Any]:
    """A timm / Hugging Face folder: the ``config.json`` a checkpoint folder holds
    (:func:`pdevision.engine.hub.hub_config`: ``num_classes`` at the top, never in ``model_args``, which
    ``transformers`` passes to ``timm.create_model`` beside its own ``num_classes``), ``model.safetensors`` and the
    model card ``README.md``; files with the umask's modes, written into a folder beside ``output`` and renamed into
    place. Read back with ``local-dir:``; with ``val_set``, torch.ao's dynamic int8 of the loaded model measured (the
    folder keeps the float weights timm reads)."""
    config = hub_config(model, meta)
    if config is None:
        raise CheckpointError(f"{meta.get('model')} is not a timm model that a timm / Hugging Face folder can rebuild")
    with replaced_atomically(output) as tmp:
        os.mkdir(tmp)  # not tempfile.mkdtemp: 0700 whatever the umask
        try:
            state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
            # written by Python, not safetensors' save_file, which creates the file 0600 whatever the umask
            (tmp / "model.safetensors").write_bytes(safetensors.torch.save(state, metadata={"format": "pt"}))
            (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            (tmp / "README.md").write_text(card)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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
    height, width = to_2tuple(meta["img_size"])  # one side or (height, width), checked by the reader
    if min(height, width) < min_input_size(model):  # traced, the model's own message would show the shape as tensors
        raise CheckpointError(
            f"checkpoint {checkpoint}: its image size {_shown(height, width)} is below the {min_input_size(model)} px "
            f"that {meta.get('model')} takes at least; it cannot be exported at that size"
        )
    if dynamic:  # a dynamic graph is traced at twice the total stride at least: a 1x1 last stage would fix the sizes
        height, width = (max(side, 2 * min_input_size(model)) for side in (height, width))
    result: dict[str, Any] = {"format": fmt, "output": str(output), "model": meta.get("model"), "int8": int8}
    try:
        x = torch.randn(2, int(meta.get("model_args", {}).get("in_chans", 3)), height, width)
        with torch.no_grad():
            if fmt == "onnx":
                result.update(_write_onnx(model, meta, x, output, dynamic, val_set))
            elif fmt == "pt2":
                result.update(_write_pt2(model, meta, x, output, dynamic))
            else:
                card = model_card(meta, folder, result["model"])
                result.update(_write_hub(model, meta, x, output, dynamic, val_set, card))
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
            raise
        if output.is_dir():  # a hub folder written before the check ran out of memory: it did not exist before
            shutil.rmtree(output, ignore_errors=True)
        output.unlink(missing_ok=True)
        raise CheckpointError(
            f"checkpoint {checkpoint}: exporting at its image size {_shown(height, width)} needs more memory than this "
            "machine gives (a program is traced and checked at the checkpoint's size); nothing was written"
        ) from None
    files = output.rglob("*") if output.is_dir() else [output]
    result["bytes"] = sum(f.stat().st_size for f in files if f.is_file())
    return result


@dataclass
class ExportOptions:
    """``pdevision export``'s flags."""

    checkpoint: str = setting(
        None, V.path, Flag(name="checkpoint", help="run or checkpoint folder, timm / HF folder, .pth.tar or .pth")
    )
    format: str = setting(
        None, None, Flag(help="onnx, pt2 (torch.export) or hub (timm)", choices=EXPORT_FORMATS, required=True)
    )
    output: str = setting(
        None, V.path, Flag(help="the file (onnx, pt2) or folder (hub); never replaced", required=True)
    )
    int8: bool = setting(False, None, Flag(help="dynamic int8 quantization, accuracy before and after"))
    dynamic: bool = setting(False, None, Flag(help="dynamic batch, height and width (onnx, pt2)"))
    data: str | None = setting(None, V.path, Flag(help="validation data for --int8 (default: the run's)"))
    val_split: float = setting(0.2, V.open_fraction, Flag(help="validation fraction of a single folder"))


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


HELP = "export a checkpoint: ONNX, torch.export (.pt2) or a timm / Hugging Face folder; --int8 quantizes"
register_command("export", Command(HELP, ExportOptions, run_export))
