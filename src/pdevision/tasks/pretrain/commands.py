"""``pdevision pretrain`` (also ``train --task pretrain``) and ``eval`` of its encoder checkpoints (k-NN)."""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from pdevision.engine import formats
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import checkpoint_kind, default_eval_output
from pdevision.engine.config import RunConfig
from pdevision.errors import UsageError
from pdevision.tasks import args as A
from pdevision.tasks.pretrain.config import PretrainConfig
from pdevision.tasks.pretrain.knn import knn_evaluate
from pdevision.tasks.pretrain.task import REQUIRES, pretrain
from pdevision.tasks.registry import TaskCommands, checkpoint_meta, register


def _max_rate(text: str) -> float | str | None:
    return text if text == "auto" else V.rate(text)


class PretrainCommands(TaskCommands):
    name = "pretrain"
    requires = REQUIRES
    help = "self-supervised pretraining (QB-Heat or MAE) on photos; writes an encoder checkpoint"
    default_output = "runs/pretrain"
    kinds = ("pretrain", "encoder")
    skip_run_flags = ("--warmup-epochs",)  # --warmup: a fraction of training
    run_flag_defaults: ClassVar[dict[str, Any]] = {
        "--epochs": 10,
        "--batch-size": 64,
        "--lr": "1e-3 x global batch / 64",
    }

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("pretraining: method, data and model")
        g.add_argument("--method", default="qbheat", choices=["qbheat", "mae"], help="default: qbheat")
        g.add_argument(
            "--model", default=None, help="backbone (default: vheat_micro; mae: vit_tiny_patch16_224, patch 8, depth 4)"
        )
        g.add_argument("--model-args", type=V.json_dict, default={}, help="JSON model arguments, e.g. '{\"depth\": 4}'")
        g.add_argument(
            "--data",
            type=V.path,
            default=None,
            help="ImageFolder root or an embedded set (digits, scenes: its train split), labels unused; "
            "default: scikit-image photos",
        )
        g.add_argument("--img-size", type=V.side, default=64, help="crop side in pixels (default 64)")
        g.add_argument("--crops-per-epoch", type=V.per_epoch, default=2048)
        g.add_argument("--warmup", type=V.rate_below_one, default=0.05, help="warm-up fraction of training (0.05)")
        g.add_argument("--no-verify-images", dest="verify_images", action="store_false", help="skip the decode check")
        g = p.add_argument_group("QB-Heat")
        g.add_argument("--block-size", type=V.side, default=None, help="visible block side (default: half)")
        g.add_argument("--block-position", default="center", choices=["center", "random"])
        g.add_argument("--stride", type=V.count, default=8, help="feature stride of the prediction (default 8)")
        g.add_argument("--pred-dim", type=V.width, default=128, help="channels of the predicted features")
        g.add_argument("--predictor", default="discrete", choices=["discrete", "exact"], help="(I + dx A)^n or expm")
        g.add_argument(
            "--corner", default="mean", choices=["mean", "xy", "yx"], help="order of the corner extrapolation"
        )
        g.add_argument("--constraint", default="skew", choices=["skew", "none"], help="A, B skew-symmetric or free")
        g.add_argument(
            "--max-rate",
            type=_max_rate,
            default="auto",
            help="cap on dx ||A||_2 ('none': no cap; default 'auto': 0.25 for skew, none for --constraint none)",
        )
        g.add_argument("--no-fuse-deeper", dest="fuse_deeper", action="store_false", help="only the stride's stage")
        g.add_argument("--decoder", default="transformer", choices=["transformer", "conv"])
        g = p.add_argument_group("MAE")
        g.add_argument("--mask-ratio", type=V.open_fraction, default=0.75)
        g = p.add_argument_group("decoder and loss")
        g.add_argument("--decoder-width", type=V.width, default=128)
        g.add_argument("--decoder-depth", type=V.count, default=2)
        g.add_argument("--decoder-heads", type=V.count, default=4)
        g.add_argument("--loss-region", default="unseen", choices=["unseen", "all"], help="hidden cells or whole image")
        g.add_argument("--no-norm-pix", dest="norm_pix", action="store_false", help="raw instead of per-patch pixels")

    def config(self, args: argparse.Namespace, run: RunConfig) -> PretrainConfig:
        return PretrainConfig(**A.task_fields(args, PretrainConfig), run=run)

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
        folder = formats.resolve(args.checkpoint)  # any format: an encoder's timm folder or .pth too
        output = args.output or str(default_eval_output(folder))
        meta = checkpoint_meta(args) or formats.read_meta(folder)  # the command line read it already
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
