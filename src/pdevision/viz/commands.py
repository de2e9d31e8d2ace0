"""One function per ``pdevision viz`` subcommand: build the model(s), take real images, write PNGs and a JSON
of the numbers behind them into an output folder, return those numbers (with ``files``: what was written)."""

from __future__ import annotations

import csv
import html
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn

from pdevision.data import eval_transform_for
from pdevision.engine.checkpoint import resolve_checkpoint
from pdevision.engine.modeling import load_classifier
from pdevision.engine.runtime import resolve_device
from pdevision.viz.common import (
    VizError,
    create_named_model,
    family,
    folder_images,
    load_image_files,
    model_transform,
    photo_images,
    run_data,
    run_folder_of,
    to_display,
    validation_images,
    write_json,
)
from pdevision.viz.erf import ErfResult, compute_erf, plot_erf
from pdevision.viz.gradcam import plot_cams, reshape_transform, stage_cams
from pdevision.viz.heat import HEAT_FAMILIES, TIMES, heat_figures
from pdevision.viz.symmetry import symmetry_figures

log = logging.getLogger(__name__)

#: ``viz erf`` without models: our micro models and timm's peers (random weights, no download)
DEFAULT_ERF_MODELS = (
    "vheat_micro",
    "hcnet_micro",
    "pderesnet_micro",
    "convnext_atto",
    "swin_tiny_patch4_window7_224",
    "resnet18",
)


def _nonzero_branches(name: str) -> dict[str, Any]:
    """Constructor arguments that keep the residual branches of a randomly initialised model non-zero: timm's
    ResNet and PDE-ResNet zero the last BatchNorm of each block and ConvNeXt scales its branches by 1e-6, so at
    initialisation their ERF would be that of the stem and downsampling layers alone."""
    if name.startswith(("resnet", "pderesnet")):
        return {"zero_init_last": False}
    if name.startswith("convnext"):
        return {"ls_init_value": 1.0}
    return {}


def _images_for_named(model: nn.Module, img_size: int, data: str | None, count: int) -> tuple[torch.Tensor, str]:
    tf = model_transform(model, img_size)
    if data is not None:
        images, _ = folder_images(data, tf, count)
        return images, f"{images.shape[0]} images of {data}"
    images, names = photo_images(tf, count)
    return images, f"scikit-image photos {', '.join(names)}"


def _checkpoint_images(meta: dict[str, Any], folder: Path, data: str | None, count: int):
    data = data if data is not None else run_data(folder)
    images, targets, classes = validation_images(meta, data, count)
    return images, targets, classes, f"{images.shape[0]} validation images of {data or 'the embedded digits'}"


def erf(
    models: Sequence[str] = (),
    checkpoints: Sequence[str | Path] = (),
    output: str | Path = "runs/viz/erf",
    data: str | None = None,
    img_size: int = 128,
    images: int = 16,
    device: str = "cpu",
) -> dict[str, Any]:
    """ERF maps of every stage of the named models (random weights, ``img_size`` inputs: ``data``'s images or
    scikit-image photos) and of the checkpoints (trained weights, their validation images)."""
    out = Path(output)
    dev = resolve_device(device)
    if not models and not checkpoints:
        models = DEFAULT_ERF_MODELS
    results: list[ErfResult] = []
    sources: dict[str, str] = {}
    for ckpt in checkpoints:
        model, meta, folder = load_classifier(ckpt, dev)
        x, _, _, source = _checkpoint_images(meta, folder, data, images)
        label = f"{meta['model']} ({folder.parent.name}/{folder.name})"
        start = time.perf_counter()
        results.append(compute_erf(model, x.to(dev), label, weights=f"trained, epoch {meta.get('epoch', '?')}"))
        sources[label] = source
        log.info("ERF of %s in %.1f s", label, time.perf_counter() - start)
    for name in models:
        model = create_named_model(name, img_size, **_nonzero_branches(name)).to(dev)
        x, source = _images_for_named(model, img_size, data, images)
        start = time.perf_counter()
        init = "random init" + (", branches not zeroed" if _nonzero_branches(name) else "")
        results.append(compute_erf(model, x.to(dev), name, weights=init))
        sources[name] = source
        log.info("ERF of %s in %.1f s", name, time.perf_counter() - start)
    png = plot_erf(results, out / "erf.png")
    numbers = {"models": [r.numbers() for r in results], "images": sources}
    random = [r.model for r in results if r.weights.startswith("random init")]
    numbers["note"] = f"random weights (no pretrained download): {', '.join(random)}" if random else "trained weights"
    numbers["files"] = [str(png), str(write_json(out / "erf.json", numbers))]
    return numbers


def gradcam(
    checkpoint: str | Path,
    image_files: Sequence[str | Path] = (),
    output: str | Path = "runs/viz/gradcam",
    data: str | None = None,
    images: int = 4,
    device: str = "cpu",
) -> dict[str, Any]:
    """Grad-CAM of every stage of a trained checkpoint on image files (or its validation images)."""

    out = Path(output)
    model, meta, folder = load_classifier(checkpoint, resolve_device(device))
    classes = list(meta["classes"])
    if image_files:
        x = load_image_files(image_files, eval_transform_for(meta))
        captions = [Path(p).name for p in image_files]
        source = "image files"
    else:
        x, targets, _, source = _checkpoint_images(meta, folder, data, images)
        captions = [f"true: {classes[t]}" for t in targets]
    x = x.to(next(model.parameters()).device)
    result = stage_cams(model, x)
    display = to_display(x.cpu(), meta["mean"], meta["std"])
    png = plot_cams(display, result, classes, out / "gradcam.png", captions)
    numbers = {
        "model": meta["model"],
        "checkpoint": f"{folder.parent.name}/{folder.name}",
        "output_fmt": getattr(model, "output_fmt", "NCHW"),
        "reshape": "NHWC -> NCHW permute" if reshape_transform(model) is not None else "none",
        "images": source,
        "captions": captions,
        "predicted": [[classes[i] for i in row] for row in result["top_classes"]],
        "top_probs": result["top_probs"],
        "cam_mean_per_stage": {k: float(v.mean()) for k, v in result["maps"].items()},
    }
    numbers["files"] = [str(png), str(write_json(out / "gradcam.json", numbers))]
    return numbers


def heat(
    model: str | None = None,
    checkpoint: str | Path | None = None,
    output: str | Path = "runs/viz/heat",
    data: str | None = None,
    img_size: int = 64,
    images: int = 32,
    times: Sequence[float] = TIMES,
    gif: bool = False,
) -> dict[str, Any]:
    """The heat figures of a vHeat / HcNet / PDE-ResNet model, trained (``checkpoint``) or random (``model``)."""
    out = Path(output)
    if (model is None) == (checkpoint is None):
        raise VizError("give either --model or --checkpoint")
    if checkpoint is not None:
        net, meta, folder = load_classifier(checkpoint)
        weights = f"trained ({folder.parent.name}/{folder.name}, epoch {meta.get('epoch', '?')})"
        name = meta["model"]
    else:
        assert model is not None
        net = create_named_model(model, img_size)
        weights, name = "random init", model
    kind = family(net)
    if kind not in HEAT_FAMILIES:
        what = " (a wave operator, no heat diffusivity)" if kind == "waveformer" else ""
        raise VizError(f"viz heat shows vHeat, HcNet and PDE-ResNet models, not {name!r}{what}")
    if kind == "vheat":
        x = None
    elif checkpoint is not None:
        x = _checkpoint_images(meta, folder, data, images)[0]
    else:
        x = _images_for_named(net, img_size, data, images)[0]
    numbers = heat_figures(net, x, out, times, gif)
    numbers.update(model=name, weights=weights)
    written = sorted(str(p) for p in out.iterdir() if p.suffix in (".png", ".gif"))
    numbers["files"] = [*written, str(out / "heat.json")]
    write_json(out / "heat.json", numbers)
    return numbers


def symmetry(
    checkpoint: str | Path,
    output: str | Path = "runs/viz/symmetry",
    data: str | None = None,
    images: int = 32,
    steps: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    """PDE-ResNet weights before / after a group element and after ``sparsify``, with the logits difference."""
    out = Path(output)
    model, meta, folder = load_classifier(checkpoint)
    if family(model) != "pderesnet":
        raise VizError(
            f"viz symmetry needs a PDE-ResNet checkpoint (its weight symmetry); {folder} holds {meta['model']!r}"
        )
    x = _checkpoint_images(meta, folder, data, images)[0]
    numbers = symmetry_figures(model, x, out, seed=seed, steps=steps)
    numbers.update(model=meta["model"], checkpoint=f"{folder.parent.name}/{folder.name}")
    numbers["files"] = [
        str(out / "symmetry_weights.png"),
        str(out / "symmetry_histograms.png"),
        str(out / "symmetry.json"),
    ]
    write_json(out / "symmetry.json", numbers)
    return numbers


# -- report ---------------------------------------------------------------------------------------

# The page is at least this wide, and wider when a figure is: figures show at their natural size (one image pixel per
# CSS pixel, their 8 pt text at 8 pt), never scaled down to the page; a window narrower than a figure scrolls it.
PAGE_MIN_WIDTH_PX = 1100
_IMG_BORDER_PX = 1


def _css(width: int) -> str:
    """The page's style for a max width of ``width`` CSS pixels."""
    return (
        f"body{{font-family:sans-serif;max-width:{width}px;margin:2em auto;color:#222}}"
        f"figure{{margin:1em 0;overflow-x:auto}}img{{max-width:none;border:{_IMG_BORDER_PX}px solid #ddd}}"
        "figcaption{font-size:.9em;color:#555}"
        "table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
    )


def page_width(figures: Sequence[Path]) -> int:
    """The page's max width in CSS pixels: :data:`PAGE_MIN_WIDTH_PX`, or the widest figure with its border."""
    widths = []
    for path in figures:
        with Image.open(path) as im:
            widths.append(im.width + 2 * _IMG_BORDER_PX)
    return max([PAGE_MIN_WIDTH_PX, *widths])


def _table(rows: list[dict[str, str]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c, "")
            try:
                v = f"{float(v):.4g}" if v not in ("", None) else ""
            except ValueError:
                pass
            cells.append(f"<td>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


class _Figures:
    """Figures linked from ``index.html``: relative paths under ``out``, files that were not written left out."""

    def __init__(self, out: Path) -> None:
        self.out, self.listed = out, []

    def __call__(self, path: Path, caption: str) -> str:
        if not path.is_file():
            log.info("report: %s was not written, left out", path)
            return ""
        rel = path.relative_to(self.out).as_posix()
        self.listed.append({"src": rel, "caption": caption})
        return (
            f'<figure><a href="{html.escape(rel)}"><img src="{html.escape(rel)}" alt="{html.escape(caption)}"></a>'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )


_HEAT_CAPTIONS = {
    "vheat_diffusivity.png": "diffusivity k(w) per block, mean over channels (DC at the top left)",
    "vheat_radial.png": "k against the radial frequency |w|: channel median and 10-90% band",
    "vheat_decay.png": "decay factors exp(-k|w|^2) of each stage's first block",
    "vheat_point_source.png": "a point source spread by each stage's first operator over time",
    "hcnet_k.png": "distribution of the step size k per Heat Conduction Layer over validation images",
    "hcnet_stencils.png": "stencils N(z) - W z, mean over channels (learned, or the authors' fixed 8-neighbour mean)",
    "pderesnet_point_response.png": "each block's response to a point perturbation of its input",
}


def _run_section(run: Path | None, meta: dict[str, Any], data: str | None, fig: _Figures, numbers: dict) -> str:
    """The run: model, checkpoint, summary, curves and the metrics table of the run folder."""
    part = [
        f"<h2>Run</h2><p>model <b>{html.escape(str(meta['model']))}</b>, checkpoint "
        f"<code>{html.escape(numbers['checkpoint'])}</code> (epoch {meta.get('epoch', '?')}, "
        f"val top-1 {float(meta.get('val_top1', float('nan'))):.2f}%), data "
        f"{html.escape(data or 'the embedded digits')}.</p>"
    ]
    if run is not None and (run / "summary.json").is_file():
        summary = json.loads((run / "summary.json").read_text())
        numbers["summary"] = {k: summary.get(k) for k in ("status", "epochs_run", "best_val_top1", "seconds")}
        part.append(
            f"<p>{html.escape(str(summary.get('status')))}: {summary.get('epochs_run')} epochs in "
            f"{float(summary.get('seconds', 0)):.0f} s, best val top-1 {float(summary.get('best_val_top1', 0)):.2f}%, "
            f"{summary.get('train_images')} train / {summary.get('val_images')} val images.</p>"
        )
    if run is not None and (run / "curves.png").is_file():
        shutil.copy(run / "curves.png", fig.out / "curves.png")
        part.append(fig(fig.out / "curves.png", "training curves: loss and top-1 per epoch (from the run folder)"))
    if run is not None and (run / "metrics.csv").is_file():
        with open(run / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        wanted = ("epoch", "lr", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "epoch_seconds")
        cols = [c for c in wanted if rows and c in rows[0]]
        part.append("<h3>metrics.csv</h3>" + _table(rows, cols))
        numbers["metrics_rows"] = len(rows)
    return "".join(part)


def _maps_sections(
    folder: Path, data: str | None, images: int, fig: _Figures, numbers: dict, evaluate: Callable | None
) -> list[str]:
    """Evaluation with the confusion matrix (when an ``evaluate`` function is given), ERF and Grad-CAM."""
    out = fig.out
    sections = []
    if evaluate is not None:
        ev = evaluate(folder, data=data, output=out / "eval")
        numbers["eval"] = {k: ev[k] for k in ("top1", "top5", "loss", "images")}
        sections.append(
            f"<h2>Evaluation</h2><p>{ev['images']} validation images: top-1 {ev['top1']:.2f}%, "
            f"top-5 {ev['top5']:.2f}%, loss {ev['loss']:.4f}.</p>"
            + fig(out / "eval" / "confusion_matrix.png", "confusion matrix (rows: true class)")
        )
    e = erf(checkpoints=[folder], output=out / "erf", data=data, images=images)
    shares = "; ".join(
        f"{s['stage']}: {100 * s['area_50']:.1f}% / {100 * s['area_95']:.1f}%" for s in e["models"][0]["stages"]
    )
    caption = (
        f"ERF of each stage's centre output over {e['images'][next(iter(e['images']))]}; "
        f"share of the input area holding 50% / 95% of the gradient: {shares}"
    )
    sections.append("<h2>Effective receptive field</h2>" + fig(out / "erf" / "erf.png", caption))
    numbers["erf"] = e["models"][0]
    g = gradcam(folder, output=out / "gradcam", data=data, images=min(images, 4))
    caption = f"Grad-CAM per stage for the predicted class (grad-cam package, reshape: {g['reshape']})"
    sections.append("<h2>Grad-CAM</h2>" + fig(out / "gradcam" / "gradcam.png", caption))
    return sections


def _physics_sections(
    folder: Path, kind: str, data: str | None, images: int, steps: int, fig: _Figures, numbers: dict
) -> list[str]:
    """The family's heat figures, and the symmetry figures for PDE-ResNet."""
    out, sections = fig.out, []
    if kind in HEAT_FAMILIES:
        h = heat(checkpoint=folder, output=out / "heat", data=data, images=max(images, 8))
        shown = "".join(fig(out / "heat" / n, c) for n, c in _HEAT_CAPTIONS.items() if n.startswith(kind))
        sections.append("<h2>Heat</h2>" + shown)
        numbers["heat_files"] = [Path(f).name for f in h["files"]]
    if kind == "pderesnet":
        s = symmetry(folder, output=out / "symmetry", data=data, images=max(images, 8), steps=steps)
        diff = s["logits_rel_diff"]["group element"]
        sections.append(
            "<h2>Symmetry</h2>"
            + fig(
                out / "symmetry" / "symmetry_weights.png",
                f"1x1 weights folded / after a group element / after sparsify; relative logits difference {diff:.1e}",
            )
            + fig(
                out / "symmetry" / "symmetry_histograms.png",
                "histograms of all 1x1 weights relative to their matrix's RMS",
            )
        )
        numbers["symmetry_logits_rel_diff"] = s["logits_rel_diff"]
    return sections


def report(
    checkpoint: str | Path,
    output: str | Path = "runs/viz/report",
    data: str | None = None,
    images: int = 8,
    steps: int = 50,
    evaluate: Callable | None = None,
) -> dict[str, Any]:
    """``index.html`` in ``output``: the run's curves and metrics, the confusion matrix (from ``evaluate``, e.g.
    :func:`pdevision.tasks.classify.evaluate_checkpoint`, which the command passes), and the figures that apply to
    the model's family, every image linked relatively and present in ``output``."""

    out = Path(output)
    folder = resolve_checkpoint(checkpoint)
    model, meta, _ = load_classifier(folder)
    out.mkdir(parents=True, exist_ok=True)
    kind = family(model)
    data = data if data is not None else run_data(folder)
    fig = _Figures(out)
    numbers: dict[str, Any] = {
        "model": meta["model"],
        "family": kind,
        "checkpoint": f"{folder.parent.name}/{folder.name}",
    }
    sections = [_run_section(run_folder_of(folder), meta, data, fig, numbers)]
    sections += _maps_sections(folder, data, images, fig, numbers, evaluate)
    sections += _physics_sections(folder, kind, data, images, steps, fig, numbers)
    jsons = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    links = "".join(f'<li><a href="{html.escape(j)}">{html.escape(j)}</a></li>' for j in jsons)
    sections.append(f"<h2>Numbers</h2><ul>{links}</ul>")
    title = f"pdevision report: {meta['model']}"
    doc = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_css(page_width([out / f['src'] for f in fig.listed]))}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>\n"
    )
    index = out / "index.html"
    index.write_text(doc)
    numbers["figures"] = fig.listed
    numbers["files"] = [str(index), str(write_json(out / "report.json", numbers))]
    return numbers
