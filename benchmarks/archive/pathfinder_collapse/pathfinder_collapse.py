"""Why a Pathfinder run sits at chance: the image-to-image spread of its features, stage by stage (issue 36).

For each checkpoint given (a run folder of ``pathfinder_mixers.py``, or its ``last/`` or ``best/``), and for the same
model at step 0 (built fresh, ``torch.manual_seed(0)``), on the first ``--images`` validation images of the study set
through the checkpoint's own evaluation transform: per stage, the **spread** (the standard deviation over images,
averaged over channels and positions) and the mean **magnitude** of its output, then the spread of the logits. A
model that maps every image to one output has a spread near 0 while its magnitude stays: its features no longer
depend on the image, and its gradients carry no signal about the label.

Run: ``python -m benchmarks.archive.pathfinder_collapse.pathfinder_collapse RUN_FOLDER...`` (writes
``pathfinder_collapse.json`` and ``pathfinder_collapse.md`` beside it; ``--report-only``: the report from the JSON)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from benchmarks.archive.pathfinder_mixers import pathfinder_mixers as pf
from benchmarks.records import add_report_only, command_line, rewrite_report, save_study
from PIL import Image

from pdevision.data.pathfinder import make_pathfinder
from pdevision.data.transforms import eval_transform_for
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import load_classifier, model_from_meta

HERE = Path(__file__).resolve().parent
OUT = Path(__file__).with_suffix(".md")


def validation_batch(meta: dict[str, Any], n: int) -> torch.Tensor:
    """The first ``n`` validation images of the study set, through the evaluation transform of ``meta``."""
    drawn = make_pathfinder(pf.STUDY_SPEC.seed, "val", n, pf.STUDY_SPEC.config)
    transform = eval_transform_for(meta)
    return torch.stack([transform(Image.fromarray(img).convert("RGB")) for img in drawn.images])


@torch.no_grad()
def spread(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """Per stage (timm's ``forward_intermediates``): (spread over images, mean magnitude); and the logits' spread."""
    model.eval()
    stages = model.forward_intermediates(x, intermediates_only=True)
    return {
        "stages": [(float(s.std(0).mean()), float(s.abs().mean())) for s in stages],
        "logits": float(model(x).std(0).mean()),
    }


def rows_for(folder: Path, n: int) -> list[tuple[str, dict[str, Any]]]:
    """The trained model of ``folder`` and the same model at step 0, each with its :func:`spread`."""
    checkpoint = folder / "last" if (folder / "last").is_dir() else folder
    model, meta, _ = load_classifier(checkpoint)
    x = validation_batch(meta, n)
    torch.manual_seed(0)
    fresh = model_from_meta(meta, len(meta["classes"]))
    name = f"{folder.name} ({trained_on(folder)}), epoch {meta.get('epoch', '?')}"
    return [(name, spread(model, x)), (f"{folder.name}, step 0", spread(fresh, x))]


def trained_on(folder: Path) -> str:
    """The paths and validation top-1 of the run in ``folder`` as ``pathfinder_mixers.json`` records it."""
    for key, rec in pf.load(HERE.parent / "pathfinder_mixers" / "pathfinder_mixers.json")["runs"].items():
        if rec.get("folder") and Path(rec["folder"]).name == folder.name:
            cfg = json.loads(key)["testbed"]["config"]
            return f"{cfg['n_dashes']} dashes / {cfg['n_distractors']} distractors, final {rec['final_val_top1']:g}%"
    return "not in the record"


def table(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    depth = max(len(r["stages"]) for _, r in rows)
    head = " | ".join(f"stage {i + 1}: spread / magnitude" for i in range(depth))
    out = [f"| model | {head} | logits: spread |", "|---|" + "---:|" * (depth + 1)]
    for name, r in rows:
        cells = " | ".join(f"{s:.2g} / {m:.2g}" for s, m in r["stages"])
        out.append(f"| {name} | {cells} | {r['logits']:.2g} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="run folders of pathfinder_mixers.py")
    parser.add_argument("--images", type=int, default=256, help="validation images (default 256)")
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    if not args.folders:
        parser.error("name the run folders to read (or --report-only)")
    if not 2 <= args.images <= pf.STUDY_SPEC.n_val:
        parser.error(f"--images must be from 2 to {pf.STUDY_SPEC.n_val} (a spread needs two images), got {args.images}")
    torch.set_num_threads(1)
    try:
        rows = [row for folder in args.folders for row in rows_for(folder, args.images)]
    except CheckpointError as exc:
        raise SystemExit(f"pathfinder_collapse: {exc}") from None
    cmd = command_line(__spec__.name, argv)
    text = "\n".join(
        [
            "# Features of Pathfinder runs, stage by stage",
            "",
            f"Written by `{cmd}` ({args.images} validation images of `{pf.STUDY_SET}`); see the script's docstring.",
            "",
            *table(rows),
        ]
    )
    save_study(args.md.with_suffix(".json"), args.md, text, cmd, data=rows)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
