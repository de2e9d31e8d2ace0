"""Corruption robustness of a classification checkpoint (ImageNet-C protocol, Hendrycks & Dietterich 2019).

The validation images are resized and centre-cropped as for evaluation, then corrupted in uint8 RGB by
the ``imagecorruptions`` package (the 15 ImageNet-C corruptions, severities 1-5), then converted and
normalised. Each image's corruption is seeded (``numpy.random.SeedSequence([seed, corruption, severity,
index])``), so a run is repeatable and a baseline sees the same corrupted images.

Reported: top-1 per corruption and severity, the clean top-1, the mean corruption accuracy (mean over all
evaluated corruption/severity pairs) and, with a baseline, the corruption error of Hendrycks & Dietterich:
``CE_c = sum_s E_{s,c} / sum_s E^baseline_{s,c}`` (``E`` the top-1 error) and ``mCE`` the mean of ``CE_c``
over the evaluated corruptions, in percent (the baseline's own mCE is 100). ImageNet-C uses AlexNet as the
baseline; here it is any checkpoint given with ``baseline``. The relative mCE of that paper is not reported.

``imagecorruptions`` 1.1.2 predates NumPy 2, scikit-image 0.19 and setuptools 81; :func:`corrupt` runs it
unchanged with four local adaptations (no global state of other packages is changed): a
``resource_filename`` resolving its ``frost/`` images when ``pkg_resources`` is absent, ``gaussian(...,
multichannel=True)`` mapped to ``channel_axis=-1``, ``np.float_`` read as ``np.float64`` in its module, and
scikit-image's ``random_noise`` (impulse noise) seeded from NumPy's global state like the other corruptions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pdevision._files import not_a_regular_file
from pdevision._optional import require_all
from pdevision._values import is_int
from pdevision.data import build_datasets, eval_transform_for
from pdevision.data.corruptions import (
    CORRUPTION_REQUIRES,
    CORRUPTIONS,
    SEVERITIES,
    CorruptedDataset,
    split_transform,
)
from pdevision.data.embedded import embedded_data_of
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import load_classifier
from pdevision.engine.runtime import resolve_device
from pdevision.errors import UsageError
from pdevision.tasks.classify.evaluate import evaluate_model

log = logging.getLogger(__name__)


def mean_corruption_error(errors: dict[str, dict[int, float]], baseline: dict[str, dict[int, float]]) -> dict[str, Any]:
    """``CE_c = sum_s E_{s,c} / sum_s E^base_{s,c}`` per corruption and their mean (mCE), in percent.

    ``errors`` and ``baseline`` map corruption -> severity -> top-1 error (%); the sums run over the
    severities present in ``errors`` (all of which the baseline must have)."""
    ce: dict[str, float] = {}
    for name, per_sev in errors.items():
        if name not in baseline or any(s not in baseline[name] for s in per_sev):
            raise UsageError(f"the baseline has no error for corruption {name!r} at severities {sorted(per_sev)}")
        denom = sum(baseline[name][s] for s in per_sev)
        ce[name] = 100.0 * sum(per_sev.values()) / denom if denom > 0 else float("inf")
    return {"ce": ce, "mce": float(np.mean(list(ce.values()))) if ce else float("nan")}


def parse_corruptions(text: str | None) -> list[str]:
    """``"all"`` (or ``None``) or comma-separated names -> list of corruption names (checked)."""
    if text is None or text.strip() == "all":
        return list(CORRUPTIONS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown or not names:
        raise UsageError(f"unknown corruption(s) {unknown or text!r}; choose 'all' or from {', '.join(CORRUPTIONS)}")
    return names


def parse_severities(text: str | None) -> list[int]:
    """Comma-separated severities in 1-5 (``None``: all five)."""
    if text is None:
        return list(SEVERITIES)
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError as exc:
        raise UsageError(f"severities must be comma-separated integers 1-5, got {text!r}") from exc
    if not values or any(v not in SEVERITIES for v in values):
        raise UsageError(f"severities must be in 1-5, got {text!r}")
    return values


def top1_errors(result: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Top-1 error (%) per corruption and severity of a :func:`corruption_accuracy` result (the input of
    :func:`mean_corruption_error`)."""
    return {c: {int(s): 100.0 - a for s, a in per.items()} for c, per in result["top1"].items()}


def corruption_accuracy(
    checkpoint: str | Path,
    corruptions: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    data: str | None = None,
    batch_size: int = 64,
    device: str = "auto",
    max_images: int | None = None,
    seed: int = 0,
    val_split: float = 0.2,
    workers: int = 0,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Clean top-1 and top-1 per corruption and severity of a classification checkpoint on the
    validation split of ``data`` (the first ``max_images`` images when given); ``meta``: the checkpoint's metadata
    where it was read already."""
    dev = resolve_device(device)
    model, meta, folder = load_classifier(checkpoint, dev, fused_kernels=True, meta=meta)
    spatial, to_tensor = split_transform(eval_transform_for(meta))
    data = data if data is not None else embedded_data_of(meta)
    _, val_set = build_datasets(data, int(meta["img_size"]), val_split, None, None)
    if list(val_set.classes) != list(meta["classes"]):
        raise CheckpointError(f"checkpoint {folder} was trained for other classes than the data's")
    n = len(val_set) if max_images is None else min(len(val_set), max_images)
    indices = list(range(n))

    def top1(corruption: str | None, severity: int) -> float:
        ds = CorruptedDataset(val_set, spatial, to_tensor, corruption, severity, seed, indices)
        return float(evaluate_model(model, ds, batch_size, dev, workers=workers)["top1"])

    clean = top1(None, 0)
    table: dict[str, dict[int, float]] = {}
    for name in corruptions:
        table[name] = {}
        for severity in severities:
            table[name][int(severity)] = top1(name, int(severity))
            log.info("%s %s severity %d: top-1 %.2f%%", folder, name, severity, table[name][int(severity)])
    values = [v for per in table.values() for v in per.values()]
    return {
        "checkpoint": str(folder),
        "model": meta.get("model"),
        "images": n,
        "seed": seed,
        "clean_top1": clean,
        "top1": table,
        "mean_corruption_top1": float(np.mean(values)) if values else float("nan"),
        "per_corruption_top1": {c: float(np.mean(list(per.values()))) for c, per in table.items()},
    }


def _read_baseline(path: Path) -> dict[str, Any]:
    """A ``corruptions.json`` written by ``pdevision eval --corruptions``; ``ValueError`` naming the file and what
    was expected when it is not one (not UTF-8 JSON, not an object, a field missing or of the wrong type)."""
    expected = "a corruptions.json written by `pdevision eval --corruptions`"
    try:
        base = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--baseline {path} is not JSON ({type(exc).__name__}); expected {expected}") from None
    try:
        if not isinstance(base, dict):
            raise TypeError(f"a JSON {type(base).__name__}, not an object")
        for key in ("checkpoint", "model", "clean_top1", "mean_corruption_top1", "images"):
            if key not in base:
                raise KeyError(key)
        if not is_int(base["images"]):
            raise TypeError("'images' is not an integer")
        top1 = {str(c): {int(sev): float(acc) for sev, acc in per.items()} for c, per in dict(base["top1"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise UsageError(f"--baseline {path} does not hold corruption results ({why}); expected {expected}") from None
    return {**base, "top1": top1}


def evaluate_corruptions(
    checkpoint: str | Path,
    corruptions: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    data: str | None = None,
    batch_size: int = 64,
    device: str = "auto",
    baseline: str | Path | None = None,
    output: str | Path | None = None,
    max_images: int | None = None,
    seed: int = 0,
    workers: int = 0,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`corruption_accuracy` of ``checkpoint`` (``meta``: its metadata where it was read already) and, with
    ``baseline`` (a checkpoint, or a ``corruptions.json`` written before), its CE per corruption and mCE; written to
    ``output/corruptions.json`` when ``output`` is given."""
    require_all(CORRUPTION_REQUIRES)
    args = dict(
        corruptions=corruptions,
        severities=severities,
        data=data,
        batch_size=batch_size,
        device=device,
        max_images=max_images,
        seed=seed,
        workers=workers,
    )
    what = None if baseline is None else not_a_regular_file(baseline)
    if what is not None and what != "a folder":  # before the evaluation: a FIFO would block after it
        raise UsageError(f"--baseline {baseline} is {what}; give a checkpoint or a corruptions.json file")
    stored = None
    if baseline is not None and Path(baseline).is_file() and Path(baseline).suffix == ".json":
        stored = _read_baseline(Path(baseline))  # before the evaluation: a bad file fails at once
    result = corruption_accuracy(checkpoint, **args, meta=meta)  # type: ignore[arg-type]
    if baseline is not None:
        base = stored if stored is not None else corruption_accuracy(baseline, **args)  # type: ignore[arg-type]
        if base["images"] != result["images"] or base.get("seed") != seed:
            raise UsageError(
                f"the baseline was evaluated on {base['images']} images (seed {base.get('seed')}), "
                f"this checkpoint on {result['images']} (seed {seed}); mCE needs the same corrupted images"
            )
        result.update(mean_corruption_error(top1_errors(result), top1_errors(base)))
        keys = ("checkpoint", "model", "clean_top1", "mean_corruption_top1", "top1")
        result["baseline"] = {k: base[k] for k in keys}
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "corruptions.json").write_text(json.dumps(result, indent=2))
        result["json"] = str(out / "corruptions.json")
    return result


def format_table(result: dict[str, Any]) -> str:
    """A Markdown table of a :func:`evaluate_corruptions` result: top-1 per corruption and severity."""
    severities = sorted({s for per in result["top1"].values() for s in per})
    head = (
        "| corruption | " + " | ".join(f"s{s}" for s in severities) + " | mean |" + (" CE |" if "ce" in result else "")
    )
    rows = [head, "|---|" + "---:|" * (len(severities) + 1 + ("ce" in result))]
    for name, per in result["top1"].items():
        cells = [f"{per[s]:.1f}" for s in severities] + [f"{result['per_corruption_top1'][name]:.1f}"]
        if "ce" in result:
            cells.append(f"{result['ce'][name]:.1f}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
