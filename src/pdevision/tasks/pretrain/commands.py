"""``pdevision pretrain`` (also ``train --task pretrain``) and ``eval`` of its encoder checkpoints (k-NN)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, ClassVar

from pdevision.engine import validators as V
from pdevision.engine.checkpoint import checkpoint_kind, default_eval_output, read_meta, resolve
from pdevision.engine.config import Flag, setting
from pdevision.errors import UsageError
from pdevision.tasks.pretrain.config import PretrainConfig
from pdevision.tasks.pretrain.knn import knn_evaluate
from pdevision.tasks.pretrain.task import REQUIRES, PretrainTask
from pdevision.tasks.registry import TaskCommands, checkpoint_meta, register


@dataclass
class PretrainEvalOptions:
    """``pdevision eval`` of an encoder checkpoint (k-NN): its own flags."""

    data: str | None = setting(None, V.path, Flag(help="ImageFolder root or embedded set name (default: the digits)"))
    batch_size: int = setting(64, V.batch, Flag())
    k: int = setting(20, V.samples, Flag(help="neighbours of the k-NN vote (default 20)"))


class PretrainCommands(TaskCommands):
    name = "pretrain"
    requires = REQUIRES
    help = "self-supervised pretraining (QB-Heat or MAE) on photos; writes an encoder checkpoint"
    default_output = "runs/pretrain"
    kinds = ("pretrain", "encoder")
    eval_options = PretrainEvalOptions
    config_class: type[PretrainConfig] = PretrainConfig  # its fields with a Flag are the task's flags
    task_class = PretrainTask
    skip_run_flags = ("--warmup-epochs",)  # --warmup: a fraction of training
    run_flag_defaults: ClassVar[dict[str, Any]] = {
        "--epochs": 10,
        "--batch-size": 64,
        "--lr": "1e-3 x global batch / 64",
    }

    def report(self, s: dict[str, Any], config: PretrainConfig) -> str:
        loss = "none" if s["final_loss"] is None else f"{s['final_loss']:.4f}"
        return (
            f"{s['method']} pretraining of {s['model']}: {s['status']}, {s['epochs_run']} epochs, {s['steps']} steps "
            f"({s['images_seen']} crops) in {s['seconds']:.0f} s; final loss {loss}; "
            f"encoder checkpoint {s['encoder']} (pdevision train --init-from {s['encoder']} [--linear-probe])"
        )

    def evaluate(self, args: argparse.Namespace) -> str:
        folder = resolve(args.checkpoint)  # any format: an encoder's timm folder or .pth too
        output = args.output or str(default_eval_output(folder))
        meta = checkpoint_meta(args) or read_meta(folder)  # the command line read it already
        if checkpoint_kind(meta) == "pretrain":  # the whole pretraining state: evaluate its encoder
            raise UsageError(f"checkpoint {folder} is a pretraining checkpoint; evaluate {folder.parent / 'encoder'}")
        r = knn_evaluate(args.checkpoint, args.data, args.k, args.batch_size, args.device, output=output, meta=meta)
        return (
            f"{r['model']} encoder ({r['method']} pretraining), no classifier: k-NN (k={r['k']}) top-1 "
            f"{r['knn_top1']:.2f}% on {r['images']} images ({r['train_images']} as memory); {output}/knn.json"
        )

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        raise UsageError(
            f"{args.checkpoint} is a pretraining checkpoint (an encoder without classifier); fine-tune it first: "
            f"pdevision train --init-from RUN/encoder"
        )


register(PretrainCommands())

__all__ = ["PretrainCommands", "PretrainEvalOptions"]
