"""``pdevision train --task denoise`` / ``--task dejpeg`` and ``pdevision restore``: the flags and what they run."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, ClassVar

from pdevision.engine import validators as V
from pdevision.engine.config import Flag, RunConfig, setting
from pdevision.engine.runtime import one_line, resolve_device
from pdevision.errors import UsageError
from pdevision.tasks import args as A
from pdevision.tasks.registry import DEVICE_HELP, CheckpointOptions, Command, TaskCommands, register, register_command
from pdevision.tasks.restore.apply import restore_file
from pdevision.tasks.restore.config import REQUIRES, RestoreConfig
from pdevision.tasks.restore.task import RestoreTask


class RestoreCommands(TaskCommands):
    """``train --task denoise`` and ``train --task dejpeg`` (one class, two registrations) and ``restore``."""

    default_output = "runs/train"
    requires = REQUIRES
    config_class: type[RestoreConfig] = RestoreConfig  # its fields with a Flag are the task's flags
    task_class = RestoreTask
    run_flag_defaults: ClassVar[dict[str, Any]] = {
        "--epochs": 2,
        "--batch-size": 16,
        "--lr": 2e-3,
        "--time-budget": 300,
    }

    def __init__(self, task: str) -> None:
        self.name = task
        self.skip_flags = ("--quality",) if task == "denoise" else ("--sigma",)  # the other task's degradation
        self.help = (
            "Gaussian denoising (default: vheatir_micro, grey, embedded photos, 300 s)"
            if task == "denoise"
            else "JPEG artefact removal (default: vheatir_micro, quality 10, embedded photos, 300 s)"
        )

    def fill(self) -> dict[str, str]:
        return {"{task}": self.name}

    def config(self, args: argparse.Namespace, run: RunConfig) -> RestoreConfig:
        if args.data is None and args.patch_size > 300:
            raise UsageError(f"--patch-size {args.patch_size} is larger than the embedded photos allow (at most 300)")
        values = A.task_fields(args, self.config_class, skip=("task",))
        if values.get("baselines") is not None:
            values["baselines"] = tuple(values["baselines"])  # argparse's list
        return self.config_class(task=self.name, **values, run=run)

    def report(self, s: dict[str, Any], config: RestoreConfig) -> str:
        base = ", ".join(f"{k} {v:.2f}" for k, v in s["baselines"].items())
        best, best_ssim = s["best_val_psnr"], s["best_val_ssim"]
        return (
            f"{s['model']} {s['task']} ({s['degradation']}): {s['status']}, {s['epochs_run']} epochs, {s['steps']} "
            f"steps in {s['seconds']:.0f} s; best held-out PSNR {best if best is None else f'{best:.2f}'} dB, "
            f"SSIM {best_ssim if best_ssim is None else f'{best_ssim:.4f}'} "
            f"({s['metric_channel']}); baselines (dB): {base}; run folder {config.run.output}"
        )

    def evaluate(self, args: argparse.Namespace) -> str:
        raise UsageError(
            f"{args.checkpoint} is a {self.name} checkpoint; restore images with "
            f"`pdevision restore --checkpoint {args.checkpoint} IN OUT` (its held-out scores are in the run folder)"
        )

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        raise UsageError(
            f"{args.checkpoint} is a {self.name} checkpoint; restore images with "
            f"`pdevision restore --checkpoint {args.checkpoint} IN OUT`"
        )


@dataclass
class RestoreOptions(CheckpointOptions):
    """``pdevision restore``'s flags."""

    input: str = setting(None, V.path, Flag(name="input", help="image file (L, LA, RGB, RGBA or 16-bit grey)"))
    output: str = setting(
        None, V.output_file, Flag(name="output", help="output file (format from the extension); same size and mode")
    )
    tile: int = setting(512, V.tile, Flag(help="tile side for large images (0: whole image; default 512)"))
    overlap: int = setting(32, V.tile, Flag(help="tile overlap in pixels (default 32)"))
    device: str = setting("auto", V.device, Flag(help=DEVICE_HELP))


def run_restore(args: argparse.Namespace) -> tuple[str, int]:
    """``pdevision restore``: one image through a restoration checkpoint."""
    if args.overlap < 0 or (args.tile and args.overlap >= args.tile):
        raise UsageError(f"--overlap must be >= 0 and smaller than --tile, got {args.overlap} (tile {args.tile})")
    device = resolve_device(args.device)
    try:
        r = restore_file(args.checkpoint, args.input, args.output, args.tile or None, args.overlap, device)
    except RuntimeError as exc:  # e.g. out of memory: a smaller --tile helps
        return f"pdevision restore: failed: {one_line(exc, first=True)} (try a smaller --tile)", 1
    return (
        f"{r['input']} -> {r['output']}: {r['size'][0]}x{r['size'][1]} {r['mode']}, {r['model']} ({r['task']}), "
        f"{'tiled, ' if r['tiled'] else ''}{r['seconds']:.2f} s"
    ), 0


register(RestoreCommands("denoise"))
register(RestoreCommands("dejpeg"))
register_command(
    "restore",
    Command(
        "denoise / remove JPEG artefacts from an image with a restoration checkpoint",
        RestoreOptions,
        run_restore,
        flags={"checkpoint": {"help": "RUN/best (or a run folder) of train --task denoise|dejpeg"}},
    ),
)
