"""``pdevision train`` (the default task), ``eval`` and ``predict`` of classification checkpoints: the flags and
what they run."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from typing import Any

from pdevision.engine import validators as V
from pdevision.engine.checkpoint import default_eval_output, resolve
from pdevision.engine.config import Flag, setting
from pdevision.errors import UsageError
from pdevision.tasks import args as A
from pdevision.tasks.classify import robustness
from pdevision.tasks.classify.config import ClassifyConfig
from pdevision.tasks.classify.evaluate import display_label, evaluate_checkpoint, predict_images
from pdevision.tasks.classify.task import REQUIRES, ClassifyTask
from pdevision.tasks.registry import TaskCommands, checkpoint_meta, register

log = logging.getLogger(__name__)


ROBUSTNESS = "corruption robustness (ImageNet-C corruptions, imagecorruptions package)"


@dataclass
class ClassifyEvalOptions:
    """``pdevision eval`` of a classification checkpoint: its own flags."""

    model: str | None = setting(None, None, Flag(help="model name (default: the one stored in the checkpoint)"))
    data: str | None = setting(None, V.path, Flag(help="ImageFolder root or embedded set name (default: the run's)"))
    batch_size: int = setting(64, V.batch, Flag())
    corruptions: str | None = setting(
        None, None, Flag(ROBUSTNESS, "'all' (default) or comma-separated names", nargs="?", const="all")
    )
    severities: str | None = setting(None, None, Flag(ROBUSTNESS, "comma-separated severities 1-5 (default: all five)"))
    baseline: str | None = setting(
        None, None, Flag(ROBUSTNESS, "checkpoint (or corruptions.json) that mCE is relative to")
    )
    max_images: int | None = setting(None, V.samples, Flag(ROBUSTNESS, "evaluate only the first N val images"))


@dataclass
class ClassifyPredictOptions:
    """``pdevision predict`` with a classification checkpoint: its own flags."""

    topk: int = setting(5, V.count, Flag())
    json: bool = setting(
        False, None, Flag(help="print the result as one JSON document on stdout (the per-image lines go to stderr)")
    )
    json_out: str | None = setting(
        None,
        V.new_file,
        Flag(
            help="also write the result as JSON to FILE (a new file: an existing one is never overwritten)",
            metavar="FILE",
        ),
    )


class ClassifyCommands(TaskCommands):
    name = "classify"
    requires = REQUIRES
    help = "image classification (default: vheat_micro on the embedded digits)"
    default_output = "runs/train"
    eval_options = ClassifyEvalOptions
    predict_options = ClassifyPredictOptions
    config_class = ClassifyConfig
    task_class = ClassifyTask

    def report(self, s: dict[str, Any], config: ClassifyConfig) -> str:
        final = s["final"] or {}
        return (
            f"{s['model']}: {s['status']}, {s['epochs_run']} epochs in {s['seconds']:.0f} s; "
            f"best val top-1 {s['best_val_top1']:.2f}%, last val top-1 {final.get('val_top1', float('nan')):.2f}%; "
            f"{s['train_images']} train / {s['val_images']} val images, "
            f"{len(s['skipped_images'])} unreadable skipped; run folder {config.run.output}"
        )

    def evaluate(self, args: argparse.Namespace) -> str:
        output = args.output or str(default_eval_output(resolve(args.checkpoint)))
        if args.corruptions is None and (args.severities or args.baseline or args.max_images):
            raise UsageError("--severities, --baseline and --max-images go with --corruptions")
        if args.corruptions is not None:  # corruption robustness (ImageNet-C protocol)
            r = robustness.evaluate_corruptions(
                args.checkpoint,
                robustness.parse_corruptions(args.corruptions),
                robustness.parse_severities(args.severities),
                args.data,
                args.batch_size,
                args.device,
                baseline=args.baseline,
                output=output,
                max_images=args.max_images,
                meta=checkpoint_meta(args),
            )
            line = f"clean top-1 {r['clean_top1']:.2f}%  mean corruption top-1 {r['mean_corruption_top1']:.2f}%"
            if "mce" in r:
                line += f"  mCE {r['mce']:.1f} (baseline {r['baseline']['model']} = 100)"
            table = robustness.format_table(r)
            head = f"{r['model']} on {r['images']} images, top-1 (%) per corruption and severity:"
            return f"{head}\n{table}\n{line}; {r['json']}"
        r = evaluate_checkpoint(
            args.checkpoint, args.model, args.data, args.batch_size, output, args.device, meta=checkpoint_meta(args)
        )
        per_class = ", ".join(f"{display_label(c)} {v:.1f}%" for c, v in r["per_class_top1"].items() if v is not None)
        return (
            f"{r['model']} on {r['images']} images: top-1 {r['top1']:.2f}%  top-5 {r['top5']:.2f}%  "
            f"loss {r['loss']:.4f}  {r['images_per_s']:.0f} img/s\nper-class top-1: {per_class}\n"
            f"confusion matrix: {r.get('confusion_png') or r['eval_json']}"
        )

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        results = predict_images(
            args.checkpoint, args.images, args.topk, args.device, errors="report", meta=checkpoint_meta(args)
        )
        lines = []
        for r in results:
            if "error" in r:
                lines.append(f"{r['image']}: FAILED: {r['error']}")
            else:
                lines.append(r["image"] + ": " + ", ".join(f"{display_label(c)} {p:.3f}" for c, p in r["top"]))
        document = json.dumps(results, indent=2, ensure_ascii=False)
        if args.json_out is not None:
            A.write_new_file(args.json_out, document + "\n")
            lines.append(f"JSON written to {args.json_out}")
        if args.json:  # stdout is the JSON alone; the human lines go to the log (stderr)
            for line in lines:
                log.info("%s", line)
            output = document
        else:
            output = "\n".join(lines)
        failed = [r["image"] for r in results if "error" in r]
        if failed:
            raise PartialFailure(output, f"{len(failed)} of {len(results)} images could not be read")
        return output, 0


class PartialFailure(UsageError):
    """Some inputs failed, the others were done: ``output`` is printed before the one-line error."""

    def __init__(self, output: str, message: str) -> None:
        super().__init__(message)
        self.output = output


register(ClassifyCommands())

__all__ = ["ClassifyCommands", "ClassifyEvalOptions", "ClassifyPredictOptions", "PartialFailure"]
