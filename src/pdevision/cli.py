"""The ``pdevision`` command."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
from PIL import Image

from pdevision import __version__, viz
from pdevision._optional import MissingDependencyError, require, require_all
from pdevision.bench import count_macs, count_params
from pdevision.bench.models import COMPILED, DEFAULT_PEERS, FUSED, LARGER_PEERS, split_variant
from pdevision.bench.run import DEFAULT_OURS, run_bench
from pdevision.bench.runs import run_in_processes
from pdevision.data import DataError
from pdevision.engine import formats
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import (
    NO_SPACE_ERRNOS,
    CheckpointError,
    NoSpaceError,
    checkpoint_kind,
    no_space_message,
)
from pdevision.engine.distributed import DistributedTimeoutError, communication_failed, exit_after_timeout
from pdevision.engine.lock import RunLockedError
from pdevision.engine.metadata import MetadataError
from pdevision.engine.resume import recorded_config, restorable_settings
from pdevision.engine.runtime import NonFiniteLossError, one_line, resolve_device
from pdevision.errors import UsageError
from pdevision.models import list_models, list_restoration_models
from pdevision.models.factory import ModelArgumentError, ModelNameError, build_model
from pdevision.models.restoration import build_restoration_model
from pdevision.tasks import TaskCommands, get_task, task_for_kind, tasks
from pdevision.tasks.args import add_run_arguments, is_rank0, run_config
from pdevision.tasks.classify import evaluate_checkpoint
from pdevision.tasks.classify.commands import PartialFailure
from pdevision.tasks.config_file import config_defaults, load_config_file
from pdevision.viz.common import VizError


def _models_rows(img_size: int | None, pattern: str = "", released: bool = False) -> Iterator[str]:
    """The rows of the `models` table, each as soon as it is counted: parameters of models built on the meta device
    (no memory, no initialisation), and GMACs at ``img_size`` (a forward of the folded model) when it is given;
    ``released``: a column of the pretrained tags with a file to load (``pretrained=True``)."""
    head = ["model", "params (M)"] + ([f"GMACs at {img_size} (folded)"] if img_size is not None else [])
    head += ["released weights (`pretrained=True`)"] if released else []
    yield "| " + " | ".join(head) + " |"
    yield "|---|---:|" + ("---:|" if img_size is not None else "") + ("---|" if released else "")
    for name in list_models(pattern):
        if img_size is None:
            with torch.device("meta"):  # parameters counted, none allocated
                model = timm.create_model(name)
            cells = [name, f"{count_params(model) / 1e6:.2f}"]
        else:
            model = timm.create_model(name)
            cells = [name, f"{count_params(model) / 1e6:.2f}", f"{count_macs(model, img_size) / 1e9:.2f}"]
        if released:
            cells.append(", ".join(timm.list_pretrained(f"{name}.*")) or "-")
        yield "| " + " | ".join(cells) + " |"
    restoration = _restoration_names(pattern)
    if restoration:
        yield ""
        yield "| restoration model (`train --task denoise/dejpeg`) | params (M, colour) |"
        yield "|---|---:|"
    for name in restoration:
        with torch.device("meta"):  # parameters counted, none allocated
            model = build_restoration_model(name, 3, 128, {})
        yield f"| {name} | {count_params(model) / 1e6:.2f} |"


def _restoration_names(pattern: str = "") -> list[str]:
    return [n for n in list_restoration_models() if not pattern or fnmatch.fnmatch(n, pattern)]


def cmd_models(args: argparse.Namespace) -> int:
    if not list_models(args.pattern) and not _restoration_names(args.pattern):
        raise ModelNameError(f"no registered model matches {args.pattern!r} (expected a wildcard such as 'vheat*')")
    if args.img_size is not None and not args.macs:
        raise UsageError("--img-size is the resolution of the MAC count: it goes with --macs")
    img_size = (args.img_size or 224) if args.macs else None
    for row in _models_rows(img_size, args.pattern, released=True):  # a row as soon as it is counted
        print(row, flush=True)
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
    if name not in SAMPLE_PHOTOS:
        raise UsageError(
            f"scikit-image has no sample photo {name!r} bundled (choose one of {', '.join(SAMPLE_PHOTOS)})"
        )
    skimage_data = require("skimage.data", "data")
    return Image.fromarray(np.asarray(getattr(skimage_data, name)())).convert("RGB")


def cmd_demo(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    photo = _sample_photo(args.photo)  # a wrong name fails before the (slow) table
    print(f"pdevision {__version__}: models registered in timm\n")
    for row in _models_rows(224):
        print(row, flush=True)
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


def cmd_bench(args: argparse.Namespace) -> int:
    require_all([("matplotlib", "viz")])  # the plots at the end
    if args.threads:
        torch.set_num_threads(args.threads)
    device = str(resolve_device(args.device))  # "auto": the GPU where there is one, else the CPU
    if "fp16" in args.dtype and not device.startswith("cuda"):  # oneDNN has no fp16 primitives for this CPU
        raise UsageError(f"--dtype fp16 needs a CUDA device, the bench runs on {device} (use fp32 or bf16 there)")
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
        device=device,
        dtype=args.dtype,
        train_resolutions=tuple(args.train_resolutions),
        operators=not args.no_operators,
        operator_sides=tuple(sorted(set(args.operator_sides))),
        allocator=args.allocator,
    )
    if args.runs > 1:  # each run a fresh process; the folder's record is their median
        result = run_in_processes(args.runs, Path(args.out), args.threads, kwargs)
    else:
        result = run_bench(out_dir=Path(args.out), **kwargs)
    print((Path(args.out) / "results.md").read_text())
    print(f"written to {args.out} in {result['seconds']:.0f} s")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump); a flag of another task is named as such."""

    unknown_hint: Any = None

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments:") and self.unknown_hint is not None:
            for flag in message.split(":", 1)[1].split():
                hint = self.unknown_hint(flag.split("=", 1)[0])
                if hint:
                    message = hint
                    break
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- pdevision viz ---------------------------------------------------------------------------------


# optional packages (module, extra) of the viz commands beyond matplotlib, checked before they compute anything
VIZ_REQUIRES = {"gradcam": (("pytorch_grad_cam", "viz"),), "report": (("pytorch_grad_cam", "viz"),)}


def cmd_viz(args: argparse.Namespace) -> int:
    what = args.viz_command
    if what is None:
        raise UsageError("choose what to show: erf, gradcam, heat, symmetry or report (pdevision viz --help)")
    require_all([("matplotlib", "viz"), *VIZ_REQUIRES.get(what, ())])
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
        r = viz.report(args.checkpoint, args.output, args.data, args.images, args.steps, evaluate_checkpoint)
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
    q.add_argument("--img-size", type=V.figure_side, default=128, help="input size for --models (default 128)")
    q.add_argument("--images", type=V.samples, default=16, help="images to average over (default 16)")
    q.add_argument("--device", type=V.device, default="cpu")
    q.add_argument("--output", type=V.output_folder, default="runs/viz/erf", help="folder for erf.png and erf.json")
    q = vsub.add_parser("gradcam", help="Grad-CAM per stage of a trained checkpoint (grad-cam package)")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("images", nargs="*", help="image files (default: validation images of the run's data)")
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--num-images", type=V.samples, default=4, help="validation images without files (default 4)")
    q.add_argument("--device", type=V.device, default="cpu")
    q.add_argument(
        "--output", type=V.output_folder, default="runs/viz/gradcam", help="folder for gradcam.png and gradcam.json"
    )
    q = vsub.add_parser("heat", help="vHeat k(w) and point sources, HcNet k and stencils, PDE-ResNet point responses")
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", default=None, help="model name, random weights")
    g.add_argument("--checkpoint", default=None, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--img-size", type=V.figure_side, default=64, help="input size for --model (default 64)")
    q.add_argument("--images", type=V.samples, default=32, help="images for HcNet / PDE-ResNet (default 32)")
    q.add_argument(
        "--times",
        nargs="+",
        type=V.bounded(float, 0, None, low_open=True),
        default=[0.25, 0.5, 1.0, 2.0, 4.0],
        help="point-source times",
    )
    q.add_argument("--gif", action="store_true", help="also vheat_point_source.gif")
    q.add_argument("--output", type=V.output_folder, default="runs/viz/heat")
    q = vsub.add_parser("symmetry", help="PDE-ResNet weights under a group element and sparsify; logits difference")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--images", type=V.samples, default=32, help="images for the logits difference (default 32)")
    q.add_argument("--steps", type=V.repeats, default=100, help="sparsify steps (default 100)")
    q.add_argument("--seed", type=V.seed, default=0, help="seed of the random group element")
    q.add_argument("--output", type=V.output_folder, default="runs/viz/symmetry")
    q = vsub.add_parser("report", help="one index.html: curves, metrics, confusion matrix and the figures above")
    q.add_argument("--checkpoint", required=True, help=ckpt_help)
    q.add_argument("--data", default=None, help=data_help)
    q.add_argument("--images", type=V.samples, default=8, help="images for the figures (default 8)")
    q.add_argument("--steps", type=V.repeats, default=50, help="sparsify steps for PDE-ResNet (default 50)")
    q.add_argument(
        "--output", type=V.output_folder, default="runs/viz/report", help="folder for index.html and its files"
    )


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="throughput, memory, FLOPs against timm's peers (Swin, ConvNeXt, DeiT, ResNet)")
    p.add_argument("--models", nargs="+", default=None, help="default: our tiny models and the four tiny peers")
    p.add_argument("--peers", choices=["small", "base"], default=None, help="also the small or base peers")
    p.add_argument("--resolutions", nargs="+", type=V.side, default=[224, 512, 768, 1024])
    p.add_argument("--batch", type=V.batch, default=None, help="default: 8 at 224 and below, 1 above")
    p.add_argument("--repeats", type=V.repeats, default=5, help="timed repeats, median reported (default 5)")
    p.add_argument(
        "--runs",
        type=V.bounded(int, 1, 20),
        default=1,
        help="run the whole bench this many times, each in a fresh process (OUT/run1, ...); OUT's record is the "
        "median over the runs, each ratio with its range (default 1: one run, in this process)",
    )
    p.add_argument("--train-resolutions", nargs="*", type=V.side, default=[224], help="training-step sizes")
    p.add_argument("--device", type=V.device, default="cpu")
    p.add_argument("--dtype", nargs="+", choices=["fp32", "bf16", "fp16"], default=["fp32"], help="autocast dtypes")
    p.add_argument(
        "--out", type=V.output_folder, default="runs/bench", help="results folder (CSV, JSON, Markdown, PNG)"
    )
    p.add_argument("--threads", type=V.count, default=None, help="torch CPU threads (default: torch's)")
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
    p.add_argument("--operator-sides", nargs="+", type=V.side, default=[14, 28, 56, 112, 160, 256], help="map sides")
    p.add_argument(
        "--allocator",
        choices=["steady", "default"],
        default="steady",
        help="steady (default): freed memory stays in the process, so timings do not depend on glibc's adaptive "
        "thresholds and page faults; default: the C allocator as configured",
    )
    p.set_defaults(func=cmd_bench)


# -- the task commands: train, pretrain, eval, predict and the tasks' own (restore), built from the registry -----


def _task_flags(task: TaskCommands) -> set[str]:
    """The flags ``pdevision train --task NAME`` takes."""
    p = _Parser(add_help=False)
    _add_training(p, task)
    return {flag for action in p._actions for flag in action.option_strings}


def _add_training(p: argparse.ArgumentParser, task: TaskCommands) -> None:
    add_run_arguments(p, task.default_output, skip=task.skip_run_flags, defaults=task.run_flag_defaults)
    task.add_arguments(p)


def _train_hint(chosen: str) -> Any:
    def hint(flag: str) -> str | None:
        owners = [name for name, t in tasks().items() if name != chosen and flag in _task_flags(t)]
        if not owners:
            return None
        return f"{flag} is not an option of --task {chosen} (it is one of --task {', '.join(owners)})"

    return hint


def _checkpoint_hint(chosen: str, which: str) -> Any:
    def hint(flag: str) -> str | None:
        owners = []
        for name, t in tasks().items():
            add = getattr(t, f"add_{which}_arguments")
            if name == chosen or add is None:
                continue
            p = _Parser(add_help=False)
            add(p)
            if flag in {f for action in p._actions for f in action.option_strings}:
                owners.append(name)
        if not owners:
            return None
        return f"{flag} is not an option for {chosen} checkpoints (it is one for {', '.join(owners)} checkpoints)"

    return hint


def _add_config_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c",
        "--config",
        type=V.path,
        default=None,
        metavar="FILE",
        help="YAML or JSON file of flag values (keys as a run's config.json names them: batch_size, lr, ...); a run's "
        "config.json repeats the run; flags given here win over the file",
    )


def _add_task_parsers(sub: argparse._SubParsersAction, train_task: str, checkpoint_task: str) -> None:
    registry = tasks()
    task = get_task(train_task)
    p = sub.add_parser("train", help="train a model on a task (default: classify, vheat_micro on the embedded digits)")
    p.add_argument(
        "--task",
        default="classify",
        choices=list(registry),
        help="what to train (default classify): " + "; ".join(f"{n}: {t.help}" for n, t in registry.items()),
    )
    _add_config_argument(p)
    _add_training(p, task)
    p.set_defaults(func=cmd_train, task_commands=task)
    p.unknown_hint = _train_hint(task.name)
    pretrain = get_task("pretrain")
    p = sub.add_parser("pretrain", help=pretrain.help + " (train --task pretrain)")
    _add_config_argument(p)
    _add_training(p, pretrain)
    p.set_defaults(func=cmd_train, task_commands=pretrain, task="pretrain")
    p.unknown_hint = _train_hint("pretrain")
    checkpoint = get_task(checkpoint_task)
    p = sub.add_parser("eval", help="evaluate a checkpoint (its flags follow the checkpoint's task; default classify)")
    p.add_argument("--checkpoint", type=V.path, required=True, help="checkpoint folder (or run folder: uses best)")
    p.add_argument(
        "--output",
        type=V.output_folder,
        default=None,
        help="folder for the results (default: beside it, RUN/eval-best)",
    )
    p.add_argument("--device", type=V.device, default="auto")
    if checkpoint.add_eval_arguments is not None:
        checkpoint.add_eval_arguments(p)
    p.set_defaults(func=cmd_eval, task_commands=checkpoint)
    p.unknown_hint = _checkpoint_hint(checkpoint.name, "eval")
    p = sub.add_parser("predict", help="apply a checkpoint to image files (its flags follow the checkpoint's task)")
    p.add_argument("--checkpoint", type=V.path, required=True, help="checkpoint folder (or run folder: uses best)")
    p.add_argument("images", nargs="+", type=V.path, help="image files or folders of images")
    p.add_argument("--device", type=V.device, default="auto")
    if checkpoint.add_predict_arguments is not None:
        checkpoint.add_predict_arguments(p)
    p.set_defaults(func=cmd_predict, task_commands=checkpoint)
    p.unknown_hint = _checkpoint_hint(checkpoint.name, "predict")


def _add_extra_task_commands(sub: argparse._SubParsersAction) -> None:
    """Commands a task adds (``restore``), each once."""
    for task in tasks().values():
        for name, extra in task.extra_commands().items():
            if name in sub.choices:
                continue
            p = sub.add_parser(name, help=extra.help)
            extra.add_arguments(p)
            p.set_defaults(func=cmd_extra, extra=extra)


def cmd_train(args: argparse.Namespace) -> int:
    task: TaskCommands = args.task_commands
    require_all(task.requires)  # before the run, not at its first evaluation
    config = task.config(args, run_config(args))
    summary = task.run(config)
    if summary.get("world_size", 1) > 1 and not is_rank0():
        return 0
    print(task.report(summary, config))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    require_all(args.task_commands.requires)
    print(args.task_commands.evaluate(args))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    try:
        text, code = args.task_commands.predict(args)
    except PartialFailure as exc:  # the images that could be read are reported before the error
        print(exc.output)
        raise
    print(text)
    return code


def cmd_extra(args: argparse.Namespace) -> int:
    text, code = args.extra.run(args)
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


def _option_value(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``; the last one, as the parser keeps), or
    ``None``; the parser checks it later."""
    value = None
    for i, item in enumerate(argv):
        if item == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif item.startswith(flag + "="):
            value = item.split("=", 1)[1]
    return value


def _config_path(argv: list[str]) -> str | None:
    return _option_value(argv, "--config") or _option_value(argv, "-c")


def _task_defaults(sub: argparse.ArgumentParser) -> dict[str, Any]:
    """The task configuration of a run given no flags (``train --config``: its fields that no flag sets)."""
    args = sub.parse_args([])
    config = args.task_commands.config(args, run_config(args))
    return (
        {k: v for k, v in dataclasses.asdict(config).items() if k != "run"} if dataclasses.is_dataclass(config) else {}
    )


def _apply_config_file(parser: argparse.ArgumentParser, argv: list[str], values: dict[str, Any] | None) -> None:
    """``train --config FILE`` / ``pretrain --config FILE``: the file's values (read once, by :func:`_chosen`)
    become the defaults of the command's flags, so those on the command line win."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if values is None:
        return
    path = _config_path(argv) or f"{_option_value(argv, '--resume')} (the resumed run's config.json)"
    sub = _innermost(parser, argparse.Namespace(command=command))
    task = values.get("task")
    given = "pretrain" if command == "pretrain" else _option_value(argv, "--task")
    if task is not None and given is not None and task != given:
        if command == "pretrain":
            raise UsageError(f"--config {path} is for --task {task}, not pretrain (run: pdevision train --config)")
        values = {k: v for k, v in values.items() if k != "task"}  # the command line's --task wins
    defaults = config_defaults(sub, values, str(path), _task_defaults(sub))
    if command == "train" and task is not None and given is None:
        defaults["task"] = task
    sub.set_defaults(**defaults)


@dataclass(frozen=True)
class Chosen:
    """What the command line names before it is parsed, each file read once and passed on: the task whose flags
    ``train`` takes (``--task``, else the ``--config`` file's), the one ``eval`` / ``predict`` take (the
    checkpoint's kind), the ``--config`` file's values and the metadata of the ``--checkpoint`` at
    ``checkpoint_path``."""

    train_task: str = "classify"
    checkpoint_task: str = "classify"
    config_values: dict[str, Any] | None = None
    checkpoint_meta: dict[str, Any] | None = None
    checkpoint_path: str | None = None

    def meta_of(self, checkpoint: str | None) -> dict[str, Any] | None:
        """The metadata read of ``checkpoint`` (the parsed ``--checkpoint``), or ``None`` where the one read was of
        another path (a flag given twice: the parser keeps the last) or none was read."""
        return self.checkpoint_meta if checkpoint is not None and checkpoint == self.checkpoint_path else None


def _chosen(argv: list[str]) -> Chosen:
    """:class:`Chosen` of ``argv``; classification where no task is given (or not a valid one: the parser then
    says so). Nothing is read for ``--help``."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if {"-h", "--help"} & set(argv):
        return Chosen()
    if command in ("train", "pretrain"):
        path = _config_path(argv)
        values = load_config_file(path) if path else None
        resume = _option_value(argv, "--resume")
        if values is None and resume:  # a resumed run takes its recorded settings where no flag gives them
            found = recorded_config(resume)
            values = restorable_settings(found[0]) if found is not None else None
        name = _option_value(argv, "--task") if command == "train" else "pretrain"
        if name is None and values is not None:
            name = values.get("task")
            if name is not None and name not in tasks():
                raise UsageError(f"--config {path}: task {name!r} is not one of {', '.join(tasks())}")
        return Chosen(train_task=name if name in tasks() else "classify", config_values=values)
    if command in ("eval", "predict"):
        path = _option_value(argv, "--checkpoint")
        if not (path and path.strip()):
            return Chosen()
        try:
            meta = formats.read_meta(path)  # any format: a timm / HF folder too
        except CheckpointError:  # the command reports it, after the parser has checked the other flags
            return Chosen()
        owner = task_for_kind(checkpoint_kind(meta))
        if owner is None:
            raise CheckpointError(
                f"{path} is a checkpoint of kind {checkpoint_kind(meta)!r}, which no registered task takes"
            )
        return Chosen(checkpoint_task=owner.name, checkpoint_meta=meta, checkpoint_path=path)
    return Chosen()


def build_parser(train_task: str = "classify", checkpoint_task: str = "classify") -> argparse.ArgumentParser:
    """The ``pdevision`` parser, with the flags of ``train_task`` under ``train`` and of ``checkpoint_task`` under
    ``eval`` and ``predict``."""
    parser = _Parser(prog="pdevision", description="Vision backbones built from partial differential equations.")
    parser.add_argument("--version", action="version", version=f"pdevision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    p = sub.add_parser("models", help="list the registered models (backbones, restoration nets): parameters, GMACs")
    p.add_argument("pattern", nargs="?", default="", help="wildcard on the names, e.g. 'vheat*' (default: all)")
    p.add_argument(
        "--macs",
        action="store_true",
        help="also count GMACs: a forward of each model, folded for inference (minutes for all models; seconds for "
        "one)",
    )
    p.add_argument(
        "--img-size",
        type=V.figure_side,
        default=None,
        help="resolution for the MAC count, with --macs (default 224, at most 2048)",
    )
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("demo", help="model table, then one forward pass on a real photo")
    p.add_argument("--model", default="vheat_tiny", choices=list_models(), help="model for the forward pass")
    p.add_argument("--photo", default="chelsea", help="scikit-image sample photo (default: chelsea)")
    p.set_defaults(func=cmd_demo)
    _add_bench_parser(sub)
    _add_task_parsers(sub, train_task, checkpoint_task)
    _add_viz_parser(sub)
    _add_extra_task_commands(sub)
    return parser


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)subparser that parsed ``args`` (``pdevision viz erf``'s for ``viz erf``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _innermost(action.choices[chosen], args)
    return parser


# what the user's input causes, each reported as one line with exit code 2; every other exception is the library's
# fault: one line, exit code 1, its traceback with PDEVISION_TRACEBACK=1
USER_ERRORS = (
    UsageError,
    DataError,
    CheckpointError,
    MetadataError,
    ModelNameError,
    ModelArgumentError,
    VizError,
    MissingDependencyError,
    FileNotFoundError,
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        chosen = _chosen(argv)
        parser = build_parser(chosen.train_task, chosen.checkpoint_task)
        _apply_config_file(parser, argv, chosen.config_values)
    except (CheckpointError, UsageError, MissingDependencyError) as exc:
        command = next((a for a in argv if not a.startswith("-")), "pdevision")
        print(f"pdevision {command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    if extra:  # the subcommand names a flag it does not take (and which task's it is)
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command in ("eval", "predict"):  # read before the parser ran: the task's commands do not read it again
        args.checkpoint_meta = chosen.meta_of(args.checkpoint)
    for stream in (sys.stdout, sys.stderr):  # names from the file system may not be UTF-8 (class folders)
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return int(args.func(args))
    except USER_ERRORS as exc:  # the user's input: one line, exit 2 (any other ValueError is a fault: exit 1)
        print(f"pdevision {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except NonFiniteLossError as exc:
        print(f"pdevision {args.command}: stopped: {one_line(exc)}", file=sys.stderr)
        return 1
    except (RunLockedError, NoSpaceError) as exc:
        print(f"pdevision {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except DistributedTimeoutError as exc:
        print(f"pdevision {args.command}: stopped: {one_line(exc)}", file=sys.stderr)
        exit_after_timeout(1)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print(f"pdevision {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else: still one line; the traceback on request
        if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:  # a full disk under a command's own writes
            print(
                f"pdevision {args.command}: error: {no_space_message(exc, exc.filename or 'its output')}",
                file=sys.stderr,
            )
            return 1
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
