"""The ``pdevision`` command."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import timm
import torch
from PIL import Image

from pdevision import __version__
from pdevision.bench import count_macs, count_params
from pdevision.models import list_models


def _models_table(img_size: int) -> str:
    rows = [f"| model | params (M) | GMACs at {img_size} (folded) |", "|---|---:|---:|"]
    for name in list_models():
        model = timm.create_model(name)
        rows.append(f"| {name} | {count_params(model) / 1e6:.2f} | {count_macs(model, img_size) / 1e9:.2f} |")
    return "\n".join(rows)


def cmd_models(args: argparse.Namespace) -> int:
    print(_models_table(args.img_size))
    return 0


# scikit-image's sample photos stored in its package (others are downloaded: never at run time)
SAMPLE_PHOTOS = (
    "astronaut",
    "brick",
    "camera",
    "cat",
    "chelsea",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "logo",
    "microaneurysms",
    "moon",
    "page",
    "retina",
    "rocket",
    "text",
)


def _sample_photo(name: str) -> Image.Image:
    import skimage.data

    if name not in SAMPLE_PHOTOS:
        raise UsageError(
            f"scikit-image has no sample photo {name!r} bundled (choose one of {', '.join(SAMPLE_PHOTOS)})"
        )
    return Image.fromarray(np.asarray(getattr(skimage.data, name)())).convert("RGB")


def cmd_demo(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    photo = _sample_photo(args.photo)  # a wrong name fails before the (slow) table
    print(f"pdevision {__version__}: models registered in timm\n")
    print(_models_table(224))
    model = timm.create_model(args.model).eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    x = timm.data.create_transform(**cfg)(photo).unsqueeze(0)
    with torch.no_grad():
        start = time.perf_counter()
        logits = model(x)
        elapsed = time.perf_counter() - start
        native = torch.from_numpy(np.array(photo)).permute(2, 0, 1)[None].float() / 255.0
        native = (native - torch.tensor(cfg["mean"])[:, None, None]) / torch.tensor(cfg["std"])[:, None, None]
        feats = model.forward_intermediates(native, intermediates_only=True)
    top = logits.softmax(-1).topk(3)
    print(
        f"\n{args.model} (random weights) on scikit-image's '{args.photo}' photo, "
        f"resized to {tuple(x.shape[-2:])}: logits {tuple(logits.shape)} in {elapsed * 1000:.0f} ms, "
        f"finite: {bool(torch.isfinite(logits).all())}, top-3 class ids {top.indices[0].tolist()}"
    )
    print(
        f"at the photo's own size {tuple(native.shape[-2:])}, stage outputs: "
        + ", ".join(str(tuple(f.shape[1:])) for f in feats)
    )
    return 0


class UsageError(Exception):
    """A user error: printed as one line, exit code 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _bounded(
    convert: type[int] | type[float],
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
):
    """An argparse ``type``: a finite int or float within ``[low, high]`` (``(`` / ``)`` where open)."""
    lo = f"{'(' if low_open else '['}{'-inf' if low is None else low}"
    interval = f"{lo}, {'inf' if high is None else high}{')' if high_open else ']'}"

    def parse(text: str) -> int | float:
        kind = "an integer" if convert is int else "a number"
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind} in {interval}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number in {interval}, got {text}")
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"must be {kind} in {interval}, got {value}")
        return value

    parse.__name__ = convert.__name__
    return parse


_fraction = _bounded(float, 0.0, 1.0)  # a probability
_open_fraction = _bounded(float, 0.0, 1.0, low_open=True, high_open=True)
_rate_below_one = _bounded(float, 0.0, 1.0, high_open=True)
_non_negative = _bounded(float, 0.0)
_positive = _bounded(float, 0.0, low_open=True)
_non_negative_int = _bounded(int, 0)
_workers = _bounded(int, 0, 128)  # data loader processes: a thousand of them hung the machine instead of failing
_seed = _bounded(int, 0, 2**32 - 1)
_side = _bounded(int, 1, 16384)  # image sides in pixels: beyond this, memory runs out before anything useful
_width = _bounded(int, 1, 8192)  # channels
_count = _bounded(int, 1, 1024)  # depths, heads, strides, threads


def _device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, checked against this machine."""
    if text == "auto":
        return text
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (use auto, cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text}: CUDA is not available on this machine (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"{text}: MPS is not available on this machine (use --device cpu)")
    elif device.type != "cpu":
        raise argparse.ArgumentTypeError(f"unsupported device {text!r} (use auto, cpu, cuda, cuda:N or mps)")
    return text


def _path(text: str) -> str:
    """A path (not checked for existence here); an empty one is refused rather than read as ``.``."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _auto_augment(text: str) -> str:
    """A policy timm's transform factory builds (``rand-m9-mstd0.5-inc1``, ``augmix-m5-w4-d2``, ``original``, ...):
    checked by building it, since timm reports an unknown one with a bare ``AssertionError``."""
    from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform

    if text.startswith("rand"):
        build = rand_augment_transform
    elif text.startswith("augmix"):
        build = augment_and_mix_transform
    else:
        build = auto_augment_transform
    try:
        build(text, {"translate_const": 100, "img_mean": (124, 116, 104)})
    except (AssertionError, ValueError, KeyError, IndexError) as exc:
        why = str(exc) or "unknown policy"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an augmentation policy timm knows ({why}); e.g. rand-m9-mstd0.5-inc1, augmix-m5-w4-d2, "
            "original, v0"
        ) from None
    return text


def _output_folder(text: str) -> str:
    """A folder to write into: may exist (as a folder) or not, but must not be a file."""
    if not text:
        raise argparse.ArgumentTypeError("must name a folder")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder")
    return text


def _train_config(args: argparse.Namespace):
    from pdevision.engine import TrainConfig

    fields = TrainConfig.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in fields}
    if values.get("batch_size") is None:  # --batch-size defaults per task (classification 64)
        values.pop("batch_size", None)
    return TrainConfig(**values)


def _cmd_train_dense(args: argparse.Namespace) -> int:
    """``train --task segment|detect``: a backbone under a dense head (pdevision.tasks.segment/detect)."""
    from pdevision.tasks.segment import DenseConfig, train_dense

    fields = DenseConfig.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    if values.get("output") == "runs/train":
        values["output"] = f"runs/{args.task}"
    summary = train_dense(DenseConfig(**values))
    if summary.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    if args.task == "segment":
        score = f"best val mIoU {summary['best_val_miou']:.2f}"
    else:
        score = f"best val box mAP {summary['best_val_map']:.2f} (mAP50 {summary['best_val_map50']:.2f})"
    print(
        f"{summary['model']} + {summary['head']} on {summary['data']}: {summary['status']}, {summary['epochs_run']} "
        f"epochs in {summary['seconds']:.0f} s; {score}; {summary['train_images']} train / "
        f"{summary['val_images']} val images; run folder {values['output']}"
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from pdevision.engine import train

    if getattr(args, "task", "classify") != "classify":
        return _cmd_train_dense(args)
    from pdevision.data import RECIPES

    if args.recipe not in RECIPES:
        raise UsageError(f"recipe {args.recipe!r} is for --task segment/detect; classification: {', '.join(RECIPES)}")

    summary = train(_train_config(args))
    if summary.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    final = summary["final"] or {}
    print(
        f"{summary['model']}: {summary['status']}, {summary['epochs_run']} epochs in {summary['seconds']:.0f} s; "
        f"best val top-1 {summary['best_val_top1']:.2f}%, last val top-1 {final.get('val_top1', float('nan')):.2f}%; "
        f"{summary['train_images']} train / {summary['val_images']} val images, "
        f"{len(summary['skipped_images'])} unreadable skipped; run folder {args.output}"
    )
    return 0


def _is_rank0() -> bool:
    return os.environ.get("RANK", "0") == "0"


def cmd_eval(args: argparse.Namespace) -> int:
    from pdevision.engine import evaluate_checkpoint, read_meta, resolve_checkpoint
    from pdevision.engine.evaluate import default_eval_output

    output = args.output or str(default_eval_output(resolve_checkpoint(args.checkpoint)))
    if read_meta(args.checkpoint).get("kind") == "encoder":
        from pdevision.ssl import knn_evaluate

        r = knn_evaluate(args.checkpoint, args.data, args.k, args.batch_size, args.device, output=output)
        print(
            f"{r['model']} encoder ({r['method']} pretraining), no classifier: k-NN (k={r['k']}) top-1 "
            f"{r['knn_top1']:.2f}% on {r['images']} images ({r['train_images']} as memory); {output}/knn.json"
        )
        return 0
    if args.corruptions is not None:  # corruption robustness (ImageNet-C protocol): engine/robustness.py
        from pdevision.engine.robustness import evaluate_corruptions, format_table, parse_corruptions, parse_severities

        r = evaluate_corruptions(
            args.checkpoint,
            parse_corruptions(args.corruptions),
            parse_severities(args.severities),
            args.data,
            args.batch_size,
            args.device,
            baseline=args.baseline,
            output=output,
            max_images=args.max_images,
        )
        print(f"{r['model']} on {r['images']} images, top-1 (%) per corruption and severity:\n{format_table(r)}")
        line = f"clean top-1 {r['clean_top1']:.2f}%  mean corruption top-1 {r['mean_corruption_top1']:.2f}%"
        if "mce" in r:
            line += f"  mCE {r['mce']:.1f} (baseline {r['baseline']['model']} = 100)"
        print(f"{line}; {r['json']}")
        return 0
    r = evaluate_checkpoint(args.checkpoint, args.model, args.data, args.batch_size, output, args.device)
    print(
        f"{r['model']} on {r['images']} images: top-1 {r['top1']:.2f}%  top-5 {r['top5']:.2f}%  "
        f"loss {r['loss']:.4f}  {r['images_per_s']:.0f} img/s"
    )
    print("per-class top-1: " + ", ".join(f"{c} {v:.1f}%" for c, v in r["per_class_top1"].items() if v is not None))
    print(f"confusion matrix: {r['confusion_png']}")
    return 0


def _json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"depth\": 4}'")
    return value


def _rate(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number or 'none', got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number or 'none', got {value}")
    return value


def cmd_pretrain(args: argparse.Namespace) -> int:
    from pdevision.ssl import PretrainConfig, pretrain

    fields = PretrainConfig.__dataclass_fields__
    summary = pretrain(PretrainConfig(**{k: v for k, v in vars(args).items() if k in fields}))
    if summary.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    loss = summary["final_loss"]
    print(
        f"{summary['method']} pretraining of {summary['model']}: {summary['status']}, {summary['epochs_run']} epochs, "
        f"{summary['steps']} steps ({summary['images_seen']} crops) in {summary['seconds']:.0f} s; "
        f"final loss {loss if loss is None else f'{loss:.4f}'}; encoder checkpoint {summary['encoder']} "
        f"(pdevision train --init-from {summary['encoder']} [--linear-probe])"
    )
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from pdevision.engine import predict_images, read_meta

    if read_meta(args.checkpoint).get("kind") in ("segment", "detect"):  # dense checkpoints: overlays + JSON
        from pdevision.tasks.segment import predict_dense

        output = args.output or "runs/predict"
        r = predict_dense(args.checkpoint, args.images, output, args.device, args.score_threshold)
        print(f"{r['kind']}: {len(args.images)} images, overlays and predictions.json in {output}")
        return 0

    results = predict_images(args.checkpoint, args.images, args.topk, args.device, errors="report")
    for r in results:
        if "error" in r:
            print(f"{r['image']}: FAILED: {r['error']}")
        else:
            print(r["image"] + ": " + ", ".join(f"{c} {p:.3f}" for c, p in r["top"]))
    if args.json:
        print(json.dumps(results))
    failed = [r["image"] for r in results if "error" in r]
    if failed:
        print(f"pdevision predict: error: {len(failed)} of {len(results)} images could not be read", file=sys.stderr)
        return 2
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from pdevision.bench.models import COMPILED, DEFAULT_PEERS, FUSED, LARGER_PEERS, split_variant
    from pdevision.bench.run import DEFAULT_OURS, run_bench
    from pdevision.engine.runtime import resolve_device
    from pdevision.models.factory import build_model

    if args.threads:
        torch.set_num_threads(args.threads)
    models = list(args.models or [*DEFAULT_OURS, *DEFAULT_PEERS])
    if args.peers:
        models += [m for m in LARGER_PEERS[args.peers] if m not in models]
    # unknown names and sizes a model cannot take fail here, before any timing
    built = {name: build_model(split_variant(name)[0]) for name in models}
    ours = {name: type(model).__module__.startswith("pdevision.") for name, model in built.items()}
    sizes = {*args.resolutions, *args.train_resolutions}
    for name, model in built.items():
        low = getattr(model, "min_input_size", 1)
        if min(sizes) < low:
            raise UsageError(f"{name} takes images of at least {low} px, got a resolution of {min(sizes)}")
    if not args.no_operators and len(set(args.operator_sides)) < 2:
        raise UsageError("--operator-sides needs at least two different sides to fit an exponent (or --no-operators)")
    del built
    if args.fused_peers:  # each timm peer once more with its linear layers on the library's fused kernels
        models += [f"{m}{FUSED}" for m in models if not ours[m] and not split_variant(m)[1]]
    if args.compile:  # each model once more through torch.compile (the fused kernels step aside there)
        models += [f"{m}{COMPILED}" for m in models if split_variant(m)[0] == m]
    kwargs = dict(
        models=models,
        resolutions=list(args.resolutions),
        batch=args.batch,
        repeats=args.repeats,
        device=str(resolve_device(args.device)),  # "auto": the GPU where there is one, else the CPU
        dtype=args.dtype,
        train_resolutions=tuple(args.train_resolutions),
        operators=not args.no_operators,
        operator_sides=tuple(sorted(set(args.operator_sides))),
        allocator=args.allocator,
    )
    if args.runs > 1:  # each run a fresh process; the folder's record is their median
        from pdevision.bench.runs import run_in_processes

        result = run_in_processes(args.runs, Path(args.out), args.threads, kwargs)
    else:
        result = run_bench(out_dir=Path(args.out), **kwargs)
    print((Path(args.out) / "results.md").read_text())
    print(f"written to {args.out} in {result['seconds']:.0f} s")
    return 0


# -- restoration: train --task denoise|dejpeg, and the restore command (one block) ---------------------------

RESTORE_TASK_DEFAULTS = dict(model="vheatir_micro", batch_size=16, epochs=2, lr=2e-3, time_budget=300.0)


def _add_restore_task_args(p: argparse.ArgumentParser) -> None:
    """``--task`` and the restoration options of ``pdevision train`` (classification keeps its defaults)."""
    g = p.add_argument_group("task (--task) and image restoration (--task denoise | dejpeg)")
    g.add_argument(
        "--task",
        default="classify",
        choices=["classify", "segment", "detect", "denoise", "dejpeg"],
        help="what to train (default classify)",
    )
    g.add_argument("--sigma", default="25", help="denoise: noise level on 0-255 (15, 25, 50) or a blind range 0-55")
    g.add_argument("--quality", type=int, default=10, help="dejpeg: JPEG quality (10, 20, 30, 40; default 10)")
    g.add_argument("--color", action="store_true", help="colour images (default grey); PSNR/SSIM on Y")
    g.add_argument("--val-data", default=None, help="folder of held-out clean images (e.g. Set12)")
    g.add_argument("--patch-size", type=_bounded(int, 8, 1024), default=32, help="training patch side (default 32)")
    g.add_argument("--patches-per-epoch", type=_positive_int, default=16384, help="default 16384")
    g.add_argument("--loss", default="l1", choices=["l1", "charbonnier"], help="default l1")
    g.add_argument("--model-args", type=_json_dict, default={}, help="JSON model arguments")
    g.add_argument(
        "--baselines", nargs="*", default=None, help="classical baselines (default: noisy nlm wavelet tv bm3d)"
    )
    # restoration defaults differ (vheatir_micro, batch 16, lr 2e-3, --time-budget 300): unset here, filled per task
    p.set_defaults(model=None, batch_size=None)


def cmd_train_any(args: argparse.Namespace) -> int:
    """``pdevision train``: classification, dense prediction (``--task segment|detect``) or restoration
    (``--task denoise|dejpeg``)."""
    if args.task == "classify":
        args.model = args.model or "vheat_micro"
        args.batch_size = args.batch_size or 64
        return cmd_train(args)
    if args.task in ("segment", "detect"):
        return cmd_train(args)
    return cmd_train_restore(args)


def cmd_train_restore(args: argparse.Namespace) -> int:
    from pdevision.engine.loop import LoopConfig, fit, runtime_of
    from pdevision.tasks.restore import DEFAULT_BASELINES, RestoreConfig, RestoreTask, parse_sigma

    d = RESTORE_TASK_DEFAULTS
    if args.data is None and (args.patch_size > 300):
        raise UsageError(f"--patch-size {args.patch_size} is larger than the embedded photos allow (at most 300)")
    config = RestoreConfig(
        task=args.task,
        sigma=parse_sigma(args.sigma),
        quality=args.quality,
        model=args.model or d["model"],
        model_args=args.model_args,
        color=args.color,
        data=args.data,
        val_data=args.val_data,
        patch_size=args.patch_size,
        patches_per_epoch=args.patches_per_epoch,
        loss=args.loss,
        baselines=tuple(args.baselines) if args.baselines is not None else DEFAULT_BASELINES,
        init_from=str(args.init_from) if args.init_from is not None else None,
    )
    loop = LoopConfig(
        output=args.output,
        epochs=args.epochs or d["epochs"],
        batch_size=args.batch_size or d["batch_size"],
        lr=args.lr or d["lr"],
        opt=getattr(args, "opt", None) or "adamw",
        weight_decay=args.weight_decay if args.weight_decay is not None else 0.0,
        min_lr=args.min_lr if args.min_lr is not None else 1e-5,
        warmup_epochs=args.warmup_epochs or 0,
        clip_grad=args.clip_grad or None,
        ema_decay=None if args.no_ema else args.ema_decay,
        rank_seed=True,  # patches are drawn from torch's generator: each rank its own
        **{**runtime_of(args), "time_budget": args.time_budget if args.time_budget is not None else d["time_budget"]},
    )
    s = fit(RestoreTask(config), loop)
    if s.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    base = ", ".join(f"{k} {v:.2f}" for k, v in s["baselines"].items())
    best, best_ssim = s["best_val_psnr"], s["best_val_ssim"]
    print(
        f"{s['model']} {s['task']} ({s['degradation']}): {s['status']}, {s['epochs_run']} epochs, {s['steps']} steps "
        f"in {s['seconds']:.0f} s; best held-out PSNR {best if best is None else f'{best:.2f}'} dB, "
        f"SSIM {best_ssim if best_ssim is None else f'{best_ssim:.4f}'} "
        f"({s['metric_channel']}); baselines (dB): {base}; run folder {args.output}"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from pdevision.engine.runtime import resolve_device
    from pdevision.tasks.restore import restore_file

    if args.overlap < 0 or (args.tile and args.overlap >= args.tile):
        raise UsageError(f"--overlap must be >= 0 and smaller than --tile, got {args.overlap} (tile {args.tile})")
    device = resolve_device(args.device)
    try:
        r = restore_file(args.checkpoint, args.input, args.output, args.tile or None, args.overlap, device)
    except RuntimeError as exc:  # e.g. out of memory: a smaller --tile helps
        print(f"pdevision restore: failed: {str(exc).splitlines()[0]} (try a smaller --tile)", file=sys.stderr)
        return 1
    print(
        f"{r['input']} -> {r['output']}: {r['size'][0]}x{r['size'][1]} {r['mode']}, {r['model']} ({r['task']}), "
        f"{'tiled, ' if r['tiled'] else ''}{r['seconds']:.2f} s"
    )
    return 0


def _add_restore_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="denoise / remove JPEG artefacts from an image with a restoration checkpoint")
    p.add_argument(
        "--checkpoint", type=_path, required=True, help="RUN/best (or a run folder) of train --task denoise|dejpeg"
    )
    p.add_argument("input", type=_path, help="image file (L, LA, RGB, RGBA or 16-bit grey)")
    p.add_argument("output", type=_path, help="output file (format from the extension); same size and mode")
    p.add_argument(
        "--tile", type=_non_negative_int, default=512, help="tile side for large images (0: whole image; default 512)"
    )
    p.add_argument("--overlap", type=_non_negative_int, default=32, help="tile overlap in pixels (default 32)")
    p.add_argument("--device", type=_device, default="auto")
    p.set_defaults(func=cmd_restore)


# -- end of the restoration block ---------------------------------------------------------------------------


def _add_train_runtime_args(p: argparse.ArgumentParser) -> None:
    """The ``runtime`` group of ``pdevision train``: precision, kernels, seeds, device, resume and stopping."""
    g = p.add_argument_group("runtime")
    g.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"], help="autocast (fp16: CUDA only)")
    g.add_argument("--grad-checkpointing", action="store_true")
    g.add_argument("--compile", action="store_true", help="torch.compile the model for training")
    g.add_argument(
        "--reference-kernels",
        dest="fused_kernels",
        action="store_false",
        help="CPU: PyTorch's linear layers instead of the oneDNN training kernels (e.g. for second derivatives)",
    )
    g.add_argument("--seed", type=_seed, default=0)
    g.add_argument("--deterministic", action="store_true", help="deterministic algorithms (bitwise resume)")
    g.add_argument("--workers", type=_workers, default=0, help="data loader processes")
    g.add_argument("--device", type=_device, default="auto", help="auto, cpu, cuda, cuda:1, ...")
    g.add_argument("--resume", type=_path, default=None, help="checkpoint or run folder to resume")
    g.add_argument("--overwrite", action="store_true", help="start a new run in an --output that holds one")
    g.add_argument("--init-from", type=_path, default=None, help="checkpoint to start from (fine-tuning)")
    g.add_argument("--reset-head", action="store_true", help="with --init-from: new classifier for the data")
    g.add_argument(
        "--linear-probe", action="store_true", help="freeze all but the classifier (e.g. on a pretrained encoder)"
    )
    g.add_argument("--stop-after-epochs", type=_positive_int, default=None, help="stop early (resume later)")
    g.add_argument("--max-train-batches", type=_positive_int, default=None, help="per epoch, for smoke runs")
    g.add_argument("--time-budget", type=_positive, default=None, help="seconds of training (the schedule follows it)")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    from pdevision.data import RECIPES

    g = p.add_argument_group("data and model")
    g.add_argument("--model", default="vheat_micro", help="any registered model, ours or timm's")
    g.add_argument(
        "--data",
        type=_path,
        default=None,
        help="ImageFolder root (train/ and val/, or one folder), WebDataset shards (train/*.tar, val/*.tar), "
        "or an embedded set; default: the embedded digits",
    )
    g.add_argument("--shuffle-buffer", type=_positive_int, default=1000, help="shards: shuffle buffer (samples)")
    g.add_argument("--val-split", type=_open_fraction, default=0.2, help="validation fraction for a single folder")
    g.add_argument("--img-size", type=_side, default=None, help="default: 64 on digits, else the model's")
    g.add_argument(
        "--output", type=_output_folder, default="runs/train", help="run folder (checkpoints, metrics, plots)"
    )
    g.add_argument("--no-verify-images", dest="verify_images", action="store_false", help="skip the decode check")
    g = p.add_argument_group("schedule and optimiser (default: from --recipe)")
    from pdevision.tasks.detect import DETECT_RECIPES
    from pdevision.tasks.segment import SEGMENT_RECIPES

    g.add_argument(
        "--recipe",
        default="light",
        choices=sorted(set(RECIPES) | set(SEGMENT_RECIPES) | set(DETECT_RECIPES)),
        help="named preset: light (default), pderesnet, hcnet, vheat (alias imagenet), the papers' set-ups; "
        "--task segment: upernet_swin, --task detect: mask_rcnn_swin_1x",
    )
    g.add_argument("--epochs", type=_positive_int, default=None)
    g.add_argument(
        "--batch-size", type=_positive_int, default=None, help="per process (default 64; segment and detect 8)"
    )
    g.add_argument(
        "--lr", type=_positive, default=None, help="absolute; default: recipe lr x global batch / the recipe's batch"
    )
    g.add_argument("--opt", default=None, help="timm optimizer: sgd, momentum, nesterov, adamw, lamb, ... (recipe's)")
    g.add_argument("--momentum", type=_fraction, default=None, help="SGD-type optimizers (default: the recipe's, 0.9)")
    g.add_argument("--min-lr", type=_non_negative, default=None)
    g.add_argument("--warmup-epochs", type=_non_negative_int, default=None)
    g.add_argument("--weight-decay", type=_non_negative, default=None)
    g.add_argument("--clip-grad", type=_non_negative, default=None, help="gradient norm clip (0: off)")
    g.add_argument("--ema-decay", type=_rate_below_one, default=None, help="EMA of weights (imagenet recipe: 0.9999)")
    g.add_argument("--no-ema", action="store_true", help="turn EMA off")
    g.add_argument(
        "--drop-path", type=_rate_below_one, default=None, help="stochastic depth rate (default: the model's)"
    )
    g = p.add_argument_group("augmentation and regularisation (timm)")
    g.add_argument("--auto-augment", type=_auto_augment, default=None, help="e.g. rand-m9-mstd0.5-inc1 (RandAugment)")
    g.add_argument("--mixup", type=_non_negative, default=None, help="mixup alpha")
    g.add_argument("--cutmix", type=_non_negative, default=None, help="cutmix alpha")
    g.add_argument("--label-smoothing", type=_rate_below_one, default=None)
    g.add_argument("--re-prob", type=_fraction, default=None, help="random erasing probability")
    g.add_argument("--hflip", type=_fraction, default=None, help="horizontal flip probability")
    _add_train_runtime_args(p)
    g = p.add_argument_group("dense prediction (--task segment|detect; --data: a mask folder or a COCO folder)")
    g.add_argument("--head", default=None, help="segment: upernet (default), fpn, unet; detect: mask_rcnn, faster_rcnn")
    g.add_argument("--fve-resize", default=None, choices=["interp", "pad", "downstream"], help="vHeat FVE rule")
    g.add_argument("--multi-scale", action="store_true", help="detect: multi-scale training (shorter side)")
    g.add_argument("--train-scenes", type=_positive_int, default=None, help="embedded scenes: train set size")
    g.add_argument("--val-scenes", type=_positive_int, default=None, help="embedded scenes: val set size")


def _add_pretrain_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("method, data and model")
    g.add_argument("--method", default="qbheat", choices=["qbheat", "mae"], help="default: qbheat")
    g.add_argument(
        "--model", default=None, help="backbone (default: vheat_micro; mae: vit_tiny_patch16_224, patch 8, depth 4)"
    )
    g.add_argument("--model-args", type=_json_dict, default={}, help="JSON model arguments, e.g. '{\"depth\": 4}'")
    g.add_argument(
        "--data",
        type=_path,
        default=None,
        help="ImageFolder root or an embedded set (digits, scenes: its train split), labels unused; "
        "default: scikit-image photos",
    )
    g.add_argument("--img-size", type=_side, default=64, help="crop side in pixels (default 64)")
    g.add_argument(
        "--output", type=_output_folder, default="runs/pretrain", help="run folder (last/, encoder/, metrics, PNG)"
    )
    g.add_argument("--no-verify-images", dest="verify_images", action="store_false", help="skip the decode check")
    g = p.add_argument_group("QB-Heat")
    g.add_argument("--block-size", type=_side, default=None, help="visible block side (default: half)")
    g.add_argument("--block-position", default="center", choices=["center", "random"])
    g.add_argument("--stride", type=_count, default=8, help="feature stride of the prediction (default 8)")
    g.add_argument("--pred-dim", type=_width, default=128, help="channels of the predicted features")
    g.add_argument("--predictor", default="discrete", choices=["discrete", "exact"], help="(I + dx A)^n or expm")
    g.add_argument("--corner", default="mean", choices=["mean", "xy", "yx"], help="order of the corner extrapolation")
    g.add_argument("--constraint", default="skew", choices=["skew", "none"], help="A, B skew-symmetric or free")
    g.add_argument(
        "--max-rate",
        type=lambda t: t if t == "auto" else _rate(t),
        default="auto",
        help="cap on dx ||A||_2 ('none': no cap; default 'auto': 0.25 for skew, none for --constraint none)",
    )
    g.add_argument("--no-fuse-deeper", dest="fuse_deeper", action="store_false", help="only the stride's stage")
    g.add_argument("--decoder", default="transformer", choices=["transformer", "conv"])
    g = p.add_argument_group("MAE")
    g.add_argument("--mask-ratio", type=_open_fraction, default=0.75)
    g = p.add_argument_group("decoder and loss")
    g.add_argument("--decoder-width", type=_width, default=128)
    g.add_argument("--decoder-depth", type=_count, default=2)
    g.add_argument("--decoder-heads", type=_count, default=4)
    g.add_argument("--loss-region", default="unseen", choices=["unseen", "all"], help="hidden cells or whole image")
    g.add_argument("--no-norm-pix", dest="norm_pix", action="store_false", help="raw instead of per-patch pixels")
    g = p.add_argument_group("schedule and optimiser")
    g.add_argument("--epochs", type=_positive_int, default=10)
    g.add_argument("--crops-per-epoch", type=_positive_int, default=2048)
    g.add_argument("--time-budget", type=_positive, default=None, help="seconds of training (the schedule follows it)")
    g.add_argument("--batch-size", type=_positive_int, default=64, help="per process (default 64)")
    g.add_argument("--lr", type=_positive, default=None, help="absolute; default 1e-3 x global batch / 64")
    g.add_argument("--min-lr", type=_non_negative, default=1e-5)
    g.add_argument("--warmup", type=_rate_below_one, default=0.05, help="warm-up fraction of training (default 0.05)")
    g.add_argument("--weight-decay", type=_non_negative, default=0.05)
    g.add_argument("--clip-grad", type=_non_negative, default=None)
    g = p.add_argument_group("runtime")
    g.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    g.add_argument("--seed", type=_seed, default=0)
    g.add_argument("--deterministic", action="store_true")
    g.add_argument("--workers", type=_workers, default=0)
    g.add_argument("--device", type=_device, default="auto")
    g.add_argument(
        "--resume", type=_path, default=None, help="pretraining checkpoint (RUN/last) or run folder to resume"
    )
    g.add_argument("--overwrite", action="store_true", help="start a new run in an --output that holds one")
    g.add_argument("--stop-after-epochs", type=_positive_int, default=None)
    g.add_argument("--max-train-batches", type=_positive_int, default=None)
    g.add_argument("--no-progress", dest="progress", action="store_false")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- pdevision viz ---------------------------------------------------------------------------------


def cmd_viz(args: argparse.Namespace) -> int:
    from pdevision import viz

    what = args.viz_command
    if what is None:
        raise UsageError("choose what to show: erf, gradcam, heat, symmetry or report (pdevision viz --help)")
    if what == "erf":
        r = viz.erf(
            args.models or (), args.checkpoint or (), args.output, args.data, args.img_size, args.images, args.device
        )
        for m in r["models"]:
            shares = ", ".join(f"{100 * s['area_50']:.1f}%/{100 * s['area_95']:.1f}%" for s in m["stages"])
            print(f"{m['model']} ({m['weights']}): input area holding 50%/95% of the gradient per stage: {shares}")
        print(r["note"])
    elif what == "gradcam":
        r = viz.gradcam(args.checkpoint, args.images, args.output, args.data, args.num_images, args.device)
        print(f"{r['model']} ({r['output_fmt']} stages, reshape: {r['reshape']}) on {r['images']}")
        for caption, pred in zip(r["captions"], r["predicted"], strict=True):
            print(f"  {caption}: predicted {', '.join(pred)}")
    elif what == "heat":
        r = viz.heat(
            args.model, args.checkpoint, args.output, args.data, args.img_size, args.images, args.times, args.gif
        )
        print(f"{r['model']} ({r['weights']}): {r['family']} heat figures")
    elif what == "symmetry":
        r = viz.symmetry(args.checkpoint, args.output, args.data, args.images, args.steps, args.seed)
        d = r["logits_rel_diff"]
        print(
            f"{r['model']}: groups per stage {', '.join(r['groups'])}; relative logits difference after a random group "
            f"element {d['group element']:.2e}, after sparsify {d['sparsify']:.2e}; 1x1 weights below "
            f"{r['threshold']} x RMS {100 * r['sparsity_before']:.1f}% -> {100 * r['sparsity_after']:.1f}%"
        )
    else:
        r = viz.report(args.checkpoint, args.output, args.data, args.images, args.steps)
        print(f"{r['model']}: {len(r['figures'])} figures; open {r['files'][0]}")
    print("written: " + ", ".join(r["files"]))
    return 0


def _add_viz_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("viz", help="figures: receptive fields, Grad-CAM, heat flow, symmetry, HTML report")
    vsub = p.add_subparsers(dest="viz_command", metavar="WHAT", parser_class=_Parser)
    p.set_defaults(func=cmd_viz)
    ckpt_help = "run folder (uses best/, else last/) or checkpoint folder"
    data_help = "ImageFolder root for the images (default: the run's data, else scikit-image photos / digits)"
    q = vsub.add_parser("erf", help="effective receptive field per stage, ours and timm's peers side by side")
    q.add_argument(
        "--models", nargs="+", default=None, help="model names, random weights (default: micro models and peers)"
    )
    q.add_argument("--checkpoint", nargs="+", default=None, help=f"trained models: {ckpt_help}")
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--img-size", type=_positive_int, default=128, help="input size for --models (default 128)")
    q.add_argument("--images", type=_positive_int, default=16, help="images to average over (default 16)")
    q.add_argument("--device", type=_device, default="cpu")
    q.add_argument("--output", type=_output_folder, default="runs/viz/erf", help="folder for erf.png and erf.json")
    q = vsub.add_parser("gradcam", help="Grad-CAM per stage of a trained checkpoint (grad-cam package)")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("images", nargs="*", help="image files (default: validation images of the run's data)")
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--num-images", type=_positive_int, default=4, help="validation images without files (default 4)")
    q.add_argument("--device", type=_device, default="cpu")
    q.add_argument(
        "--output", type=_output_folder, default="runs/viz/gradcam", help="folder for gradcam.png and gradcam.json"
    )
    q = vsub.add_parser("heat", help="vHeat k(w) and point sources, HcNet k and stencils, PDE-ResNet point responses")
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", default=None, help="model name, random weights")
    g.add_argument("--checkpoint", default=None, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--img-size", type=_positive_int, default=64, help="input size for --model (default 64)")
    q.add_argument("--images", type=_positive_int, default=32, help="images for HcNet / PDE-ResNet (default 32)")
    q.add_argument(
        "--times",
        nargs="+",
        type=_bounded(float, 0, None, low_open=True),
        default=[0.25, 0.5, 1.0, 2.0, 4.0],
        help="point-source times",
    )
    q.add_argument("--gif", action="store_true", help="also vheat_point_source.gif")
    q.add_argument("--output", type=_output_folder, default="runs/viz/heat")
    q = vsub.add_parser("symmetry", help="PDE-ResNet weights under a group element and sparsify; logits difference")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--images", type=_positive_int, default=32, help="images for the logits difference (default 32)")
    q.add_argument("--steps", type=_positive_int, default=100, help="sparsify steps (default 100)")
    q.add_argument("--seed", type=int, default=0, help="seed of the random group element")
    q.add_argument("--output", type=_output_folder, default="runs/viz/symmetry")
    q = vsub.add_parser("report", help="one index.html: curves, metrics, confusion matrix and the figures above")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--images", type=_positive_int, default=8, help="images for the figures (default 8)")
    q.add_argument("--steps", type=_positive_int, default=50, help="sparsify steps for PDE-ResNet (default 50)")
    q.add_argument(
        "--output", type=_output_folder, default="runs/viz/report", help="folder for index.html and its files"
    )


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="throughput, memory, FLOPs against timm's peers (Swin, ConvNeXt, DeiT, ResNet)")
    p.add_argument("--models", nargs="+", default=None, help="default: our tiny models and the four tiny peers")
    p.add_argument("--peers", choices=["small", "base"], default=None, help="also the small or base peers")
    p.add_argument("--resolutions", nargs="+", type=_side, default=[224, 512, 768, 1024])
    p.add_argument("--batch", type=_positive_int, default=None, help="default: 8 at 224 and below, 1 above")
    p.add_argument("--repeats", type=_positive_int, default=5, help="timed repeats, median reported (default 5)")
    p.add_argument(
        "--runs",
        type=_bounded(int, 1, 20),
        default=1,
        help="run the whole bench this many times, each in a fresh process (OUT/run1, ...); OUT's record is the "
        "median over the runs, each ratio with its range (default 1: one run, in this process)",
    )
    p.add_argument("--train-resolutions", nargs="*", type=_side, default=[224], help="training-step sizes")
    p.add_argument("--device", type=_device, default="cpu")
    p.add_argument("--dtype", nargs="+", choices=["fp32", "bf16", "fp16"], default=["fp32"], help="autocast dtypes")
    p.add_argument("--out", type=_output_folder, default="runs/bench", help="results folder (CSV, JSON, Markdown, PNG)")
    p.add_argument("--threads", type=_count, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--no-operators", action="store_true", help="skip the token-mixer microbenchmark")
    p.add_argument(
        "--fused-peers",
        action="store_true",
        help="also measure each timm peer with its linear layers on the fused oneDNN kernels (NAME+fused)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="also measure each model through torch.compile (NAME+compiled; inference, weights frozen; needs a C++ "
        "compiler on the CPU)",
    )
    p.add_argument("--operator-sides", nargs="+", type=_side, default=[14, 28, 56, 112, 160, 256], help="map sides")
    p.add_argument(
        "--allocator",
        choices=["steady", "default"],
        default="steady",
        help="steady (default): freed memory stays in the process, so timings do not depend on glibc's adaptive "
        "thresholds and page faults; default: the C allocator as configured",
    )
    p.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pdevision", description="Vision backbones built from partial differential equations.")
    parser.add_argument("--version", action="version", version=f"pdevision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    p = sub.add_parser("models", help="list the registered models with parameters and GMACs")
    p.add_argument("--img-size", type=_side, default=224, help="resolution for the MAC count (default 224)")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("demo", help="model table, then one forward pass on a real photo")
    p.add_argument("--model", default="vheat_tiny", choices=list_models(), help="model for the forward pass")
    p.add_argument("--photo", default="chelsea", help="scikit-image sample photo (default: chelsea)")
    p.set_defaults(func=cmd_demo)
    _add_bench_parser(sub)
    p = sub.add_parser("train", help="train a model (default: vheat_micro on the embedded digits)")
    _add_train_args(p)
    _add_restore_task_args(p)
    p.set_defaults(func=cmd_train_any)
    p = sub.add_parser(
        "pretrain", help="self-supervised pretraining (QB-Heat or MAE) on photos; writes an encoder checkpoint"
    )
    _add_pretrain_args(p)
    p.set_defaults(func=cmd_pretrain)
    p = sub.add_parser("eval", help="evaluate a checkpoint: top-1/top-5, per class, confusion matrix")
    p.add_argument("--checkpoint", type=_path, required=True, help="checkpoint folder (or run folder: uses best)")
    p.add_argument("--model", default=None, help="model name (default: the one stored in the checkpoint)")
    p.add_argument(
        "--data", type=_path, default=None, help="ImageFolder root or embedded set name (default: the embedded digits)"
    )
    p.add_argument("--batch-size", type=_positive_int, default=64)
    p.add_argument(
        "--output", type=_output_folder, default=None, help="folder for eval.json and the PNG (default: RUN/eval-best)"
    )
    p.add_argument("--device", type=_device, default="auto")
    p.add_argument("--k", type=_positive_int, default=20, help="neighbours for an encoder checkpoint's k-NN (20)")
    g = p.add_argument_group("corruption robustness (ImageNet-C corruptions, imagecorruptions package)")
    g.add_argument(
        "--corruptions", nargs="?", const="all", default=None, help="'all' (default) or comma-separated names"
    )
    g.add_argument("--severities", default=None, help="comma-separated severities 1-5 (default: all five)")
    g.add_argument("--baseline", default=None, help="checkpoint (or corruptions.json) that mCE is relative to")
    g.add_argument("--max-images", type=_positive_int, default=None, help="evaluate only the first N val images")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("predict", help="top-k labels of image files from a checkpoint")
    p.add_argument("--checkpoint", type=_path, required=True)
    p.add_argument("images", nargs="+", type=_path, help="image files or folders of images")
    p.add_argument("--topk", type=_positive_int, default=5)
    p.add_argument("--device", type=_device, default="auto")
    p.add_argument("--json", action="store_true", help="also print the result as JSON")
    p.add_argument(
        "--output", type=_output_folder, default=None, help="segment/detect checkpoints: folder (default runs/predict)"
    )
    p.add_argument("--score-threshold", type=float, default=0.5, help="detect checkpoints: lowest score kept")
    p.set_defaults(func=cmd_predict)
    _add_viz_parser(sub)
    _add_restore_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from pdevision.data import DataError
    from pdevision.engine import CheckpointError, ModelNameError, NonFiniteLossError
    from pdevision.engine.distributed import DistributedTimeoutError, communication_failed, exit_after_timeout
    from pdevision.engine.lock import RunLockedError

    def one_line(exc: BaseException) -> str:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return text if len(text) <= 2000 else text[:2000] + " ..."

    try:
        return int(args.func(args))
    except (UsageError, DataError, CheckpointError, ModelNameError, FileNotFoundError, ValueError) as exc:
        print(f"pdevision {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except NonFiniteLossError as exc:
        print(f"pdevision {args.command}: stopped: {one_line(exc)}", file=sys.stderr)
        return 1
    except RunLockedError as exc:
        print(f"pdevision {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except DistributedTimeoutError as exc:
        print(f"pdevision {args.command}: stopped: {one_line(exc)}", file=sys.stderr)
        exit_after_timeout(1)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print(f"pdevision {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else: still one line; the traceback on request
        if os.environ.get("PDEVISION_TRACEBACK"):
            raise
        print(
            f"pdevision {args.command}: failed: {type(exc).__name__}: {one_line(exc)} "
            "(set PDEVISION_TRACEBACK=1 to see where)",
            file=sys.stderr,
        )
        if communication_failed():  # a peer is gone: a normal exit would wait for it
            exit_after_timeout(1)
        return 1


if __name__ == "__main__":
    sys.exit(main())
