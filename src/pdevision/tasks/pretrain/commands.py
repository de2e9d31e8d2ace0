"""``pdevision pretrain`` (also ``train --task pretrain``) and ``eval`` of its encoder checkpoints (k-NN)."""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from pdevision.engine import validators as V
from pdevision.engine.checkpoint import checkpoint_kind, default_eval_output, read_meta, resolve
from pdevision.engine.config import RunConfig
from pdevision.errors import UsageError
from pdevision.tasks import args as A
from pdevision.tasks.pretrain.config import PretrainConfig
from pdevision.tasks.pretrain.knn import knn_evaluate
from pdevision.tasks.pretrain.task import REQUIRES, pretrain
from pdevision.tasks.registry import TaskCommands, checkpoint_meta, register


class PretrainCommands(TaskCommands):
    name = "pretrain"
    requires = REQUIRES
    help = "self-supervised pretraining (QB-Heat or MAE) on photos; writes an encoder checkpoint"
    default_output = "runs/pretrain"
    kinds = ("pretrain", "encoder")
    config_class: type[PretrainConfig] = PretrainConfig  # its fields with a Flag are the task's flags
    skip_run_flags = ("--warmup-epochs",)  # --warmup: a fraction of training
    run_flag_defaults: ClassVar[dict[str, Any]] = {
        "--epochs": 10,
        "--batch-size": 64,
        "--lr": "1e-3 x global batch / 64",
    }

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        A.add_config_arguments(p, self.config_class)  # each field of PretrainConfig with a Flag

    def config(self, args: argparse.Namespace, run: RunConfig) -> PretrainConfig:
        return self.config_class(**A.task_fields(args, self.config_class), run=run)

    def run(self, config: PretrainConfig) -> dict[str, Any]:
        return pretrain(config)

    def report(self, s: dict[str, Any], config: PretrainConfig) -> str:
        loss = "none" if s["final_loss"] is None else f"{s['final_loss']:.4f}"
        return (
            f"{s['method']} pretraining of {s['model']}: {s['status']}, {s['epochs_run']} epochs, {s['steps']} steps "
            f"({s['images_seen']} crops) in {s['seconds']:.0f} s; final loss {loss}; "
            f"encoder checkpoint {s['encoder']} (pdevision train --init-from {s['encoder']} [--linear-probe])"
        )

    @staticmethod
    def add_eval_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data", type=V.path, default=None, help="ImageFolder root or embedded set name (default: the digits)"
        )
        p.add_argument("--batch-size", type=V.batch, default=64)
        p.add_argument("--k", type=V.samples, default=20, help="neighbours of the k-NN vote (default 20)")

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

__all__ = ["PretrainCommands"]
