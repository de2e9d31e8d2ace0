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
from pdevision.bench.compare import DEFAULT_OURS, run_bench
from pdevision.bench.models import COMPILED, DEFAULT_PEERS, FUSED, LARGER_PEERS, split_variant
from pdevision.bench.repeat import run_in_processes
from pdevision.data import DataError
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import CheckpointError, checkpoint_kind, read_meta
from pdevision.engine.config import Flag, RunConfig, flag_fields, flag_name, setting
from pdevision.engine.distributed import DistributedTimeoutError, communication_failed, exit_after_timeout
from pdevision.engine.lock import RunLockedError
from pdevision.engine.metadata import MetadataError
from pdevision.engine.resume import recorded_config, restorable_settings
from pdevision.engine.runtime import NonFiniteLossError, one_line, resolve_device
from pdevision.engine.save import NO_SPACE_ERRNOS, NoSpaceError, no_space_message
from pdevision.errors import PartialFailure, UsageError
from pdevision.models import list_models, list_restoration_models
from pdevision.models.factory import ModelArgumentError, ModelNameError, create_model
from pdevision.models.restoration import create_restoration_model
from pdevision.tasks import Command, TaskCommands, commands, get_task, task_for_kind, tasks
from pdevision.tasks.args import add_run_arguments, is_rank0, run_config
from pdevision.tasks.classify import evaluate_checkpoint
from pdevision.tasks.config_file import config_defaults, load_config_file
from pdevision.tasks.registry import (
    CheckpointOptions,
    ConfigOption,
    EvalOptions,
    PredictOptions,
    TaskOption,
    add_command_arguments,
)
from pdevision.viz.common import VizError
from pdevision.viz.options import (
    VIZ_CHECKPOINT,
    ErfOptions,
    GradcamOptions,
    HeatOptions,
    ReportOptions,
    SymmetryOptions,
)


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
            model = create_restoration_model(name, 3, 128, {})
        yield f"| {name} | {count_params(model) / 1e6:.2f} |"


def _restoration_names(pattern: str = "") -> list[str]:
    return [n for n in list_restoration_models() if not pattern or fnmatch.fnmatch(n, pattern)]


def cmd_models(args: argparse.Namespace) -> tuple[str, int]:
    if not list_models(args.pattern) and not _restoration_names(args.pattern):
        raise ModelNameError(f"no registered model matches {args.pattern!r} (expected a wildcard such as 'vheat*')")
    if args.img_size is not None and not args.macs:
        raise UsageError("--img-size is the resolution of the MAC count: it goes with --macs")
    img_size = (args.img_size or 224) if args.macs else None
    for row in _models_rows(img_size, args.pattern, released=True):  # a row as soon as it is counted
        print(row, flush=True)
    return "", 0


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


def cmd_demo(args: argparse.Namespace) -> tuple[str, int]:
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
    return "", 0


def cmd_bench(args: argparse.Namespace) -> tuple[str, int]:
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
    built = {name: create_model(split_variant(name)[0]) for name in models}
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
    return f"written to {args.out} in {result['seconds']:.0f} s", 0


# optional packages (module, extra) of the viz commands beyond matplotlib, checked before they compute anything
VIZ_REQUIRES = {"gradcam": (("pytorch_grad_cam", "viz"),), "report": (("pytorch_grad_cam", "viz"),)}


def cmd_viz(args: argparse.Namespace) -> tuple[str, int]:
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
    return "written: " + ", ".join(r["files"]), 0


# -- the options of the commands of this module (each field with a Flag is a flag: tasks/args.py) --------------


@dataclass
class ModelsOptions:
    pattern: str = setting(
        "", None, Flag(name="pattern", nargs="?", help="wildcard on the names, e.g. 'vheat*' (default: all)")
    )
    macs: bool = setting(
        False,
        None,
        Flag(
            help="also count GMACs: a forward of each model, folded for inference (minutes for all models; seconds "
            "for one)"
        ),
    )
    img_size: int | None = setting(
        None, V.figure_side, Flag(help="resolution for the MAC count, with --macs (default 224, at most 2048)")
    )


@dataclass
class DemoOptions:
    model: str = setting("vheat_tiny", None, Flag(help="model for the forward pass"))  # choices: list_models()
    photo: str = setting("chelsea", None, Flag(help="scikit-image sample photo (default: chelsea)"))


@dataclass
class BenchOptions:
    models: list[str] | None = setting(  # noqa: RUF009
        None, None, Flag(nargs="+", help="default: our tiny models and the four tiny peers")
    )
    peers: str | None = setting(None, None, Flag(help="also the small or base peers", choices=("small", "base")))
    resolutions: list[int] = setting(  # noqa: RUF009
        None, V.side, Flag(nargs="+"), factory=lambda: [224, 512, 768, 1024]
    )
    batch: int | None = setting(None, V.batch, Flag(help="default: 8 at 224 and below, 1 above"))
    repeats: int = setting(5, V.repeats, Flag(help="timed repeats, median reported (default 5)"))
    runs: int = setting(
        1,
        V.bounded(int, 1, 20),
        Flag(
            help="run the whole bench this many times, each in a fresh process (OUT/run1, ...); OUT's record is the "
            "median over the runs, each ratio with its range (default 1: one run, in this process)"
        ),
    )
    train_resolutions: list[int] = setting(  # noqa: RUF009
        None, V.side, Flag(nargs="*", help="training-step sizes"), factory=lambda: [224]
    )
    device: str = setting("cpu", V.device, Flag())
    dtype: list[str] = setting(  # noqa: RUF009
        None, None, Flag(nargs="+", choices=("fp32", "bf16", "fp16"), help="autocast dtypes"), factory=lambda: ["fp32"]
    )
    out: str = setting("runs/bench", V.output_folder, Flag(help="results folder (CSV, JSON, Markdown, PNG)"))
    threads: int | None = setting(None, V.count, Flag(help="torch CPU threads (default: torch's)"))
    no_operators: bool = setting(False, None, Flag(help="skip the token-mixer microbenchmark"))
    fused_peers: bool = setting(
        False,
        None,
        Flag(help="also measure each timm peer with its linear layers on the fused oneDNN kernels (NAME+fused)"),
    )
    compile: bool = setting(
        False,
        None,
        Flag(
            help="also measure each model through torch.compile (NAME+compiled; inference, weights frozen; needs a "
            "C++ compiler on the CPU)"
        ),
    )
    operator_sides: list[int] = setting(  # noqa: RUF009
        None, V.side, Flag(nargs="+", help="map sides"), factory=lambda: [14, 28, 56, 112, 160, 256]
    )
    allocator: str = setting(
        "steady",
        None,
        Flag(
            choices=("steady", "default"),
            help="steady (default): freed memory stays in the process, so timings do not depend on glibc's adaptive "
            "thresholds and page faults; default: the C allocator as configured",
        ),
    )


def _viz_commands() -> dict[str, Command]:
    trained = {"checkpoint": {"help": VIZ_CHECKPOINT}}
    return {
        "erf": Command(
            "effective receptive field per stage, ours and timm's peers side by side",
            ErfOptions,
            cmd_viz,
            {"checkpoint": {"nargs": "+", "required": False, "help": f"trained models: {VIZ_CHECKPOINT}"}},
        ),
        "gradcam": Command(
            "Grad-CAM per stage of a trained checkpoint (grad-cam package)", GradcamOptions, cmd_viz, trained
        ),
        "heat": Command(
            "vHeat k(w) and point sources, HcNet k and stencils, PDE-ResNet point responses",
            HeatOptions,
            cmd_viz,
            {"checkpoint": {"required": False, "one_of": "--model, --checkpoint", "help": VIZ_CHECKPOINT}},
        ),
        "symmetry": Command(
            "PDE-ResNet weights under a group element and sparsify; logits difference",
            SymmetryOptions,
            cmd_viz,
            trained,
        ),
        "report": Command(
            "one index.html: curves, metrics, confusion matrix and the figures above", ReportOptions, cmd_viz, trained
        ),
    }


def _commands() -> dict[str, Command]:
    """The commands of their own: this module's, then those the tasks register (``export``, ``restore``); ``train``,
    ``pretrain``, ``eval`` and ``predict`` take the flags of a task and are built apart (:func:`_add_task_parsers`)."""
    return {
        "models": Command(
            "list the registered models (backbones, restoration nets): parameters, GMACs", ModelsOptions, cmd_models
        ),
        "demo": Command(
            "model table, then one forward pass on a real photo",
            DemoOptions,
            cmd_demo,
            {"model": {"choices": tuple(list_models())}},
        ),
        "bench": Command(
            "throughput, memory, FLOPs against timm's peers (Swin, ConvNeXt, DeiT, ResNet)", BenchOptions, cmd_bench
        ),
        "viz": Command(
            "figures: receptive fields, Grad-CAM, heat flow, symmetry, HTML report",
            run=cmd_viz,
            subcommands=_viz_commands(),
        ),
        **commands(),
    }


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


def _add_command(sub: argparse._SubParsersAction, name: str, command: Command) -> None:
    """``pdevision NAME`` (and its subcommands): its flags from ``command.options``; it runs ``command.run``."""
    p = sub.add_parser(name, help=command.help)
    add_command_arguments(p, command.options, flags=command.flags)
    p.set_defaults(func=cmd_run, run=command.run)
    if command.subcommands:
        inner = p.add_subparsers(dest=f"{name}_command", metavar="WHAT", parser_class=_Parser)
        for what, subcommand in command.subcommands.items():
            _add_command(inner, what, subcommand)


def cmd_run(args: argparse.Namespace) -> int:
    text, code = args.run(args)
    if text:
        print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


# -- the task commands: train, pretrain, eval, predict, built from the registry ------------------------------------


def _add_training(p: argparse.ArgumentParser, task: TaskCommands) -> None:
    add_run_arguments(p, task.default_output, skip=task.skip_run_flags, defaults=task.run_flag_defaults)
    task.add_arguments(p)


def _flags(add: Any) -> set[str]:
    """The flags that ``add(parser)`` declares."""
    p = _Parser(add_help=False)
    add(p)
    return {flag for action in p._actions for flag in action.option_strings}


def _train_hint(chosen: str) -> Any:
    def hint(flag: str) -> str | None:
        if flag in _flags(lambda p: _add_training(p, get_task(chosen))):  # its own flag, after "--": no other task's
            return None
        owners = [
            name for name, t in tasks().items() if name != chosen and flag in _flags(lambda p, t=t: _add_training(p, t))
        ]
        if not owners:
            return None
        return f"{flag} is not an option of --task {chosen} (it is one of --task {', '.join(owners)})"

    return hint


def _checkpoint_hint(chosen: str, which: str) -> Any:
    def hint(flag: str) -> str | None:
        owners = []
        for name, t in tasks().items():
            options = getattr(t, f"{which}_options")
            if (
                name != chosen
                and options is not None
                and flag in _flags(lambda p, o=options: add_command_arguments(p, o))
            ):
                owners.append(name)
        if not owners:
            return None
        return f"{flag} is not an option for {chosen} checkpoints (it is one for {', '.join(owners)} checkpoints)"

    return hint


def _add_task_parsers(sub: argparse._SubParsersAction, train_task: str, checkpoint_task: str) -> None:
    registry = tasks()
    task = get_task(train_task)
    p = sub.add_parser("train", help="train a model on a task (default: classify, vheat_micro on the embedded digits)")
    described = "what to train (default classify): " + "; ".join(f"{n}: {t.help}" for n, t in registry.items())
    add_command_arguments(p, TaskOption, ConfigOption, flags={"task": {"choices": tuple(registry), "help": described}})
    _add_training(p, task)
    p.set_defaults(func=cmd_train, task_commands=task)
    p.unknown_hint = _train_hint(task.name)
    pretrain = get_task("pretrain")
    p = sub.add_parser("pretrain", help=pretrain.help + " (train --task pretrain)")
    add_command_arguments(p, ConfigOption)
    _add_training(p, pretrain)
    p.set_defaults(func=cmd_train, task_commands=pretrain, task="pretrain")
    p.unknown_hint = _train_hint("pretrain")
    checkpoint = get_task(checkpoint_task)
    for name, shared, helps in (
        ("eval", EvalOptions, "evaluate a checkpoint (its flags follow the checkpoint's task; default classify)"),
        ("predict", PredictOptions, "apply a checkpoint to image files (its flags follow the checkpoint's task)"),
    ):
        p = sub.add_parser(name, help=helps)
        add_command_arguments(p, shared, getattr(checkpoint, f"{name}_options"))
        p.set_defaults(func=cmd_eval if name == "eval" else cmd_predict, task_commands=checkpoint)
        p.unknown_hint = _checkpoint_hint(checkpoint.name, name)


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
    text, code = args.task_commands.predict(args)
    if text:
        print(text)
    return code


# -- choosing the parser: a first pass of argparse reads the words that choose the task -----------------------------


class _FirstPassError(Exception):
    """The first pass could not read the command line: the full parser says what is wrong."""


class _FirstPass(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _FirstPassError(message)


# the run flags the first pass leaves to the full parser (add_run_arguments skips by flag name): all but --resume;
# declared there, a bad value of any of them made the first pass fail, so --task, --config and --resume went unread
_ALL_BUT_RESUME = frozenset(
    name
    for f in flag_fields(RunConfig)
    for name in (flag_name(f), *(f.metadata["flag"].off or ())[:1])
    if name != "--resume"
)


def _first_pass(argv: list[str]) -> argparse.Namespace:
    """The words of ``argv`` that choose the parser, read by argparse (``parse_known_args``: every other word is the
    full parser's): ``train --task`` and ``--config``, ``train`` / ``pretrain --config`` and ``--resume``, ``eval`` /
    ``predict --checkpoint``
    (their declarations: :mod:`pdevision.tasks.registry`) and ``--help``. Exact flags only: an abbreviation is
    refused after the full parse (:func:`main`)."""
    parser = _FirstPass(add_help=False, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", parser_class=_FirstPass)
    for name, options in (
        ("train", (TaskOption, ConfigOption)),
        ("pretrain", (ConfigOption,)),
        ("eval", (CheckpointOptions,)),
        ("predict", (CheckpointOptions,)),
    ):
        p = sub.add_parser(name, add_help=False, allow_abbrev=False)
        p.add_argument("-h", "--help", action="store_true")  # the full parser answers it; nothing is read for it
        add_command_arguments(p, *options, flags={"checkpoint": {"required": False}})
        if name in ("train", "pretrain"):  # --resume, as the run settings declare it
            add_run_arguments(p, "", skip=_ALL_BUT_RESUME)
        p.set_defaults(task=None)  # given or not
    try:
        return parser.parse_known_args(argv)[0]
    except _FirstPassError:  # the full parser says what is wrong
        return argparse.Namespace(command=None)


@dataclass(frozen=True)
class Chosen:
    """What the first pass chose, each file read once and passed on: the task whose flags ``train`` takes
    (``--task``, else the ``--config`` file's), the one ``eval`` / ``predict`` take (the checkpoint's kind), the
    ``--config`` file's values and the metadata of the ``--checkpoint`` at ``checkpoint_path``."""

    train_task: str = "classify"
    checkpoint_task: str = "classify"
    config_values: dict[str, Any] | None = None
    config_path: str | None = None
    resumed: str | None = None  # the --resume whose recorded settings are the defaults (no --config given)
    given_task: str | None = None
    checkpoint_meta: dict[str, Any] | None = None
    checkpoint_path: str | None = None

    def meta_of(self, checkpoint: str | None) -> dict[str, Any] | None:
        """The metadata read of ``checkpoint`` (the parsed ``--checkpoint``), or ``None`` where none was read."""
        return self.checkpoint_meta if checkpoint is not None and checkpoint == self.checkpoint_path else None


def _choose(first: argparse.Namespace) -> Chosen:
    """:class:`Chosen` of the first pass; classification where no task is given (or not a valid one: the full
    parser then says so). Nothing is read for ``--help``."""
    command = first.command
    if command in ("train", "pretrain"):
        given = first.task if command == "train" else "pretrain"
        path = first.config
        values = load_config_file(path) if path and not first.help else None
        resume = first.resume
        if (
            values is None and resume and not first.help
        ):  # a resumed run takes its recorded settings where no flag gives them
            found = recorded_config(resume)
            values = restorable_settings(found[0]) if found is not None else None
        name = given
        if name is None and values is not None:
            name = values.get("task")
            if name is not None and (not isinstance(name, str) or name not in tasks()):  # a list: unhashable
                source = f"--config {path}" if path else _resumed_source(resume)
                raise UsageError(f"{source}: task {name!r:.80} is not one of {', '.join(tasks())}")
        return Chosen(
            train_task=name if name in tasks() else "classify",
            config_values=values,
            config_path=path,
            given_task=given,
            resumed=resume if path is None else None,
        )
    if command in ("eval", "predict") and first.checkpoint and first.checkpoint.strip() and not first.help:
        path = first.checkpoint
        try:
            meta = read_meta(path)  # any format: a timm / HF folder too
        except CheckpointError:  # the command reports it, after the parser has checked the other flags
            return Chosen()
        owner = task_for_kind(checkpoint_kind(meta))
        if owner is None:
            raise CheckpointError(
                f"{path} is a checkpoint of kind {checkpoint_kind(meta)!r}, which no registered task takes"
            )
        return Chosen(checkpoint_task=owner.name, checkpoint_meta=meta, checkpoint_path=path)
    return Chosen()


def _resumed_source(resume: str | None) -> str:
    """How a message names the recorded settings of the run ``--resume`` continues (its ``config.json``)."""
    return f"--resume {resume}: the run's config.json"


def _task_defaults(sub: argparse.ArgumentParser) -> dict[str, Any]:
    """The task configuration of a run given no flags (``train --config``: its fields that no flag sets)."""
    args = sub.parse_args([])
    config = args.task_commands.config(args, run_config(args))
    return (
        {k: v for k, v in dataclasses.asdict(config).items() if k != "run"} if dataclasses.is_dataclass(config) else {}
    )


def _apply_config_file(parser: argparse.ArgumentParser, command: str, chosen: Chosen) -> None:
    """``train --config FILE`` / ``pretrain --config FILE``, or ``--resume RUN`` alone (the run's recorded
    settings): the values (read once, by :func:`_choose`) become the defaults of the command's flags, so those on the
    command line win."""
    values = chosen.config_values
    source = f"--config {chosen.config_path}" if chosen.config_path else _resumed_source(chosen.resumed)
    if values is None:
        return
    sub = _innermost(parser, argparse.Namespace(command=command))
    task, given = values.get("task"), chosen.given_task
    if chosen.resumed and not chosen.config_path and task is not None and given is not None and task != given:
        raise UsageError(
            f"--task {given} differs from the run's {task} ({source}); a resumed run keeps its task: leave --task "
            "out, or start a new run"
        )
    if task is not None and given is not None and task != given:
        if command == "pretrain":
            raise UsageError(f"{source} is for --task {task}, not pretrain (run: pdevision train --config)")
        values = {k: v for k, v in values.items() if k != "task"}  # the command line's --task wins
    defaults = config_defaults(sub, values, source, _task_defaults(sub))
    if command == "train" and task is not None and given is None:
        defaults["task"] = task
    sub.set_defaults(**defaults)


def parser_for(argv: list[str]) -> tuple[argparse.ArgumentParser, Chosen]:
    """The parser of ``argv`` (its task's flags, the ``--config`` file's values as defaults) and what chose it."""
    first = _first_pass(argv)
    chosen = _choose(first)
    parser = build_parser(chosen.train_task, chosen.checkpoint_task)
    if first.command in ("train", "pretrain"):
        _apply_config_file(parser, first.command, chosen)
    return parser, chosen


def build_parser(train_task: str = "classify", checkpoint_task: str = "classify") -> argparse.ArgumentParser:
    """The ``pdevision`` parser, with the flags of ``train_task`` under ``train`` and of ``checkpoint_task`` under
    ``eval`` and ``predict``."""
    parser = _Parser(prog="pdevision", description="Vision backbones built from partial differential equations.")
    parser.add_argument("--version", action="version", version=f"pdevision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in _commands().items():
        if name == "viz":  # the task commands before it, as --help has always listed them
            _add_task_parsers(sub, train_task, checkpoint_task)
        _add_command(sub, name, command)
    return parser


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)subparser that parsed ``args`` (``pdevision viz erf``'s for ``viz erf``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _innermost(action.choices[chosen], args)
    return parser


def _shown_word(word: str) -> str:
    """A word of the command line as an error names it: quoted where it is empty or holds what does not show (a
    zero-width space, a control character), so that ``--epochs\\u200b`` does not read as ``--epochs``."""
    return word if word and word.isprintable() and not word.isspace() else repr(word)


# what the user's input causes, each reported as one line with exit code 2; some inputs unreadable and the others
# done (PartialFailure): exit code 3; every other exception is the library's fault: one line, exit code 1, its
# traceback with PDEVISION_TRACEBACK=1
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
        parser, chosen = parser_for(argv)
    except (CheckpointError, UsageError, MissingDependencyError) as exc:
        command = next((a for a in argv if not a.startswith("-")), "pdevision")
        print(f"pdevision {command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    if extra:  # the subcommand names a flag it does not take (and which task's it is)
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(map(_shown_word, extra))}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "train" and (args.task != chosen.train_task or args.config != chosen.config_path):
        # an abbreviation (--tas, --conf): the full parser took it, the first pass (exact flags) did not
        _innermost(parser, args).error("write --task and --config in full (they choose the flags of the command)")
    if args.command in ("eval", "predict"):  # read before the parser ran: the task's commands do not read it again
        args.checkpoint_meta = chosen.meta_of(args.checkpoint)
    for stream in (sys.stdout, sys.stderr):  # names from the file system may not be UTF-8 (class folders)
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # the library speaks at INFO; other libraries only warn (timm's "Loaded ... from checkpoint" is not the user's news)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("pdevision").setLevel(logging.INFO)
    try:
        return int(args.func(args))
    except PartialFailure as exc:  # some inputs could not be read (each named already), the others were done: exit 3
        print(f"pdevision {args.command}: {one_line(exc)}", file=sys.stderr)
        return 3
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
