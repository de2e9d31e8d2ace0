"""``pdevision train`` (the default task), ``eval`` and ``predict`` of classification checkpoints: the flags and
what they run."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from pdevision.engine import validators as V
from pdevision.engine.checkpoint import default_eval_output, resolve
from pdevision.engine.config import Flag, setting
from pdevision.errors import PartialFailure, UsageError
from pdevision.tasks import args as A
from pdevision.tasks.classify import robustness
from pdevision.tasks.classify.config import ClassifyConfig
from pdevision.tasks.classify.evaluate import display_label, evaluate_checkpoint
from pdevision.tasks.classify.predict import iter_predictions
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
    batch_size: int = setting(32, V.batch, Flag(help="images per forward pass"))
    workers: int = setting(
        2, V.workers, Flag(help="processes decoding the next batches while the model runs (0: none, in this one)")
    )
    threads: int | None = setting(None, V.count, Flag(help="torch CPU threads (default: torch's choice, one per core)"))
    json: bool = setting(
        False, None, Flag(help="print JSON Lines on stdout: one object per image, as its batch is done")
    )
    json_out: str | None = setting(
        None,
        V.new_file,
        Flag(
            help="also write every result as one JSON document to FILE at the end (a new file, written whole: an "
            "existing one is never overwritten)",
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
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        predictions = iter_predictions(
            args.checkpoint,
            args.images,
            args.topk,
            args.device,
            args.batch_size,
            errors="report",
            meta=checkpoint_meta(args),
            workers=args.workers,
        )
        # stdout: a line (or with --json a JSON object) per image, as its batch is done; stderr: the unreadable
        # images, the progress bar (on a terminal only: tqdm's disable=None), the summary with --json
        note = sys.stderr if args.json else sys.stdout
        results: list[dict[str, Any]] = []
        try:
            with tqdm(total=len(predictions), unit="image", disable=None, leave=False, file=sys.stderr) as bar:
                for r in predictions:
                    if args.json:
                        _emit(json.dumps(r, ensure_ascii=False), sys.stdout)
                    if "error" in r:
                        _emit(f"{r['image']}: FAILED: {r['error']}", sys.stderr)
                    elif not args.json:
                        _emit(_line(r), sys.stdout)
                    if args.json_out is not None:
                        results.append(r)
                    bar.update(1)
        except BrokenPipeError:  # stdout's reader is gone (`| head`): stop quietly, as a command SIGPIPE ends
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at the exit's flush
            return "", 141
        lines = []
        if predictions.labelled:
            lines.append(
                f"top-1 accuracy {100.0 * predictions.correct / predictions.labelled:.2f}% "
                f"({predictions.correct} of the {predictions.labelled} images in folders named by a class)"
            )
        if args.json_out is not None:
            A.write_new_file(args.json_out, json.dumps(_document(args, predictions, results), indent=2) + "\n")
            lines.append(f"JSON written to {args.json_out}")
        for line in lines:
            _emit(line, note)
        if predictions.failed:
            raise PartialFailure(f"{predictions.failed} of {len(predictions)} images could not be read")
        return "", 0


def _line(r: dict[str, Any]) -> str:
    """An image's line: its top classes with their probabilities (and its true class where its folder names one)."""
    line = r["image"] + ": " + "; ".join(f"{c} {p:.3f}" for c, p in r["top"])  # ImageNet's names hold commas
    return line + (f" (true: {r['true']})" if "true" in r else "")


def _emit(line: str, stream: Any) -> None:
    """One line on ``stream`` now (above the progress bar where one is drawn)."""
    tqdm.write(line, file=stream)
    stream.flush()


def _document(args: argparse.Namespace, predictions: Any, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``--json-out``'s document: what was run, the counts, every result."""
    return {
        "checkpoint": str(args.checkpoint),
        "model": predictions.meta.get("model"),
        "images": len(predictions),
        "unreadable": predictions.failed,
        "labelled": predictions.labelled,
        "top1": 100.0 * predictions.correct / predictions.labelled if predictions.labelled else None,
        "results": results,
    }


register(ClassifyCommands())

__all__ = ["ClassifyCommands", "ClassifyEvalOptions", "ClassifyPredictOptions", "PartialFailure"]
