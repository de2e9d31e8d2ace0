"""Command-line arguments the tasks declare: value types with one-line errors, and the run settings every task
shares (:func:`add_run_arguments` -> :func:`run_config`). The ``pdevision`` command (:mod:`pdevision.cli`) builds its
parsers from these and from each task's own declaration (:mod:`pdevision.tasks.registry`)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform

from pdevision.engine.checkpoint import checkpoint_folder_of
from pdevision.engine.config import RunConfig
from pdevision.engine.metadata import MetadataError, parse_json
from pdevision.models.factory import ModelArgumentError, check_model_args


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
# counts that cost time or memory in proportion: each bounded where the cost is already absurd, so a typo (or a
# hostile value) is one line at parse time instead of hours of work or terabytes asked of the allocator
_epochs = _bounded(int, 1, 100_000)
_non_negative_epochs = _bounded(int, 0, 100_000)
_per_epoch = _bounded(int, 1, 10_000_000)  # patches, crops, batches drawn per epoch
_scenes = _bounded(int, 1, 100_000)  # generated scenes, cached in memory (about 44 kB each at 64 px)
_samples = _bounded(int, 1, 100_000)  # shuffle buffers, images to show or average over
_batch = _bounded(int, 1, 65_536)  # images in one evaluation or benchmark batch
_repeats = _bounded(int, 1, 10_000)  # timed repeats, optimisation steps of a figure
_tile = _bounded(int, 0, 16_384)  # restore tiles: 0 (whole image) or a side in pixels
_figure_side = _bounded(int, 1, 2048)  # inputs of random-weight figures (a vHeat at 16384 px builds for minutes)


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
    _outside_checkpoints(text)
    return text


def _outside_checkpoints(text: str) -> None:
    """Refuse a place to write that is (or lies inside) a checkpoint folder: its next save replaces it whole."""
    folder = checkpoint_folder_of(text)
    if folder is not None:
        raise argparse.ArgumentTypeError(
            f"{text} is inside the checkpoint folder {folder}, which the next save replaces whole (deleting what is "
            "written there); write beside it instead"
        )


def _output_file(text: str) -> str:
    """A file to write (restore's output): not empty, and not inside a checkpoint folder."""
    _path(text)
    _outside_checkpoints(str(Path(text).parent))
    return text


def _new_file(text: str) -> str:
    """A file to create (``predict --json-out``): not empty, not there yet (a user's file is never overwritten), in
    a folder that exists, and not inside a checkpoint folder."""
    _path(text)
    path = Path(text)
    if path.exists() or path.is_symlink():
        raise argparse.ArgumentTypeError(f"{text} exists (it is not overwritten; name a new file)")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist")
    _outside_checkpoints(str(path.parent))
    return text


def write_new_file(path: str | Path, text: str) -> None:
    """Write ``text`` into a file that must not exist yet (created exclusively: one made meanwhile is not replaced)."""
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{path} exists (it is not overwritten; name a new file)") from None


def _json_dict(text: str) -> dict:
    """``--model-args``: a JSON object of plain constructor arguments (the rules of checkpoint metadata: no weights
    to fetch or read, no URL or path, bounded integers; they are stored in every checkpoint of the run)."""
    try:
        value = parse_json(text)
    except MetadataError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("metadata", "model arguments", 1)) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"depth\": 4}'")
    if "img_size" in value:  # the task sets it from --img-size / --patch-size; twice was a TypeError at build time
        raise argparse.ArgumentTypeError("img_size is set with --img-size (restoration: --patch-size), not here")
    if "num_classes" in value:  # the task sizes the classifier from the data; twice was a TypeError at build time
        raise argparse.ArgumentTypeError("num_classes is set by the task (the data's classes), not here")
    try:
        return check_model_args(value)
    except ModelArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


positive_int = _positive_int
bounded = _bounded
fraction = _fraction
open_fraction = _open_fraction
rate_below_one = _rate_below_one
non_negative = _non_negative
positive = _positive
non_negative_int = _non_negative_int
side = _side
width = _width
count = _count
epochs = _epochs
non_negative_epochs = _non_negative_epochs
per_epoch = _per_epoch
scenes = _scenes
samples = _samples
batch = _batch
repeats = _repeats
tile = _tile
figure_side = _figure_side
seed = _seed
device = _device
path = _path
auto_augment = _auto_augment
output_folder = _output_folder
output_file = _output_file
new_file = _new_file
json_dict = _json_dict
rate = _rate

# RunConfig field -> the flags that set it (the same for every task)
RUN_FLAGS = (
    "--output",
    "--epochs",
    "--batch-size",
    "--lr",
    "--opt",
    "--momentum",
    "--min-lr",
    "--warmup-epochs",
    "--weight-decay",
    "--clip-grad",
    "--ema-decay",
    "--no-ema",
    "--amp",
    "--compile",
    "--reference-kernels",
    "--seed",
    "--deterministic",
    "--workers",
    "--threads",
    "--device",
    "--resume",
    "--overwrite",
    "--stop-after-epochs",
    "--max-train-batches",
    "--time-budget",
    "--no-progress",
)


def add_run_arguments(
    p: argparse.ArgumentParser, output: str, skip: Iterable[str] = (), defaults: dict[str, Any] | None = None
) -> None:
    """The run settings (:class:`RunConfig`) as flags, but those in ``skip``; ``None`` defaults mean "the task's".
    ``defaults``: help text for the task's defaults (flag -> value)."""
    skip, shown = set(skip), dict(defaults or {})

    def add(group: argparse._ArgumentGroup, flag: str, **kw: Any) -> None:
        if flag in skip:
            return
        if flag in shown:
            kw["help"] = f"{kw.get('help', '')} (default {shown[flag]})".strip()
        group.add_argument(flag, **kw)

    g = p.add_argument_group("run: schedule and optimiser (default: the task's recipe)")
    add(
        g,
        "--output",
        type=_output_folder,
        default=None,
        help=f"run folder (default {output}; with --resume, the resumed run's own folder)",
    )
    p.set_defaults(default_output=output)
    add(g, "--epochs", type=_epochs, default=None)
    add(g, "--batch-size", type=_positive_int, default=None, help="per process")
    add(
        g, "--lr", type=_positive, default=None, help="absolute; default: recipe lr x global batch / the recipe's batch"
    )
    add(g, "--opt", default=None, help="timm optimizer: sgd, momentum, nesterov, adamw, lamb, ...")
    add(g, "--momentum", type=_fraction, default=None, help="SGD-type optimizers")
    add(g, "--min-lr", type=_non_negative, default=None)
    add(g, "--warmup-epochs", type=_non_negative_epochs, default=None)
    add(g, "--weight-decay", type=_non_negative, default=None)
    add(g, "--clip-grad", type=_non_negative, default=None, help="gradient norm clip (0: off)")
    add(g, "--ema-decay", type=_rate_below_one, default=None, help="EMA of weights (0: off)")
    add(g, "--no-ema", action="store_true", help="turn EMA off")
    g = p.add_argument_group("run: precision, devices, resume, stopping")
    add(g, "--amp", default="none", choices=["none", "bf16", "fp16"], help="autocast (fp16: CUDA only)")
    add(g, "--compile", action="store_true", help="torch.compile the model for training")
    add(
        g,
        "--reference-kernels",
        dest="fused_kernels",
        action="store_false",
        help="CPU: the plain PyTorch modules instead of the oneDNN training kernels (e.g. second derivatives)",
    )
    add(g, "--seed", type=_seed, default=0)
    add(g, "--deterministic", action="store_true", help="deterministic algorithms (bitwise resume)")
    add(g, "--workers", type=_workers, default=0, help="data loader processes")
    add(
        g,
        "--threads",
        type=_count,
        default=None,
        help="torch CPU threads (default: one per core; fewer where other jobs share the CPU, whose threads would "
        "otherwise wait on each other)",
    )
    add(g, "--device", type=_device, default="auto", help="auto, cpu, cuda, cuda:1, ...")
    add(g, "--resume", type=_path, default=None, help="checkpoint (RUN/last) or run folder to resume")
    add(g, "--overwrite", action="store_true", help="start a new run in an --output that holds one")
    add(g, "--stop-after-epochs", type=_epochs, default=None, help="stop early (resume later)")
    add(g, "--max-train-batches", type=_per_epoch, default=None, help="per epoch, for smoke runs")
    add(g, "--time-budget", type=_positive, default=None, help="seconds of training (the schedule follows it)")
    add(g, "--no-progress", dest="progress", action="store_false", help="no progress bar (shown only on a terminal)")


def run_config(args: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of parsed run flags (those a task skipped keep their defaults)."""
    ema = 0.0 if getattr(args, "no_ema", False) else getattr(args, "ema_decay", None)
    keys = (
        "output",
        "epochs",
        "batch_size",
        "lr",
        "opt",
        "momentum",
        "min_lr",
        "warmup_epochs",
        "weight_decay",
        "clip_grad",
        "amp",
        "compile",
        "fused_kernels",
        "seed",
        "deterministic",
        "workers",
        "threads",
        "device",
        "resume",
        "overwrite",
        "stop_after_epochs",
        "max_train_batches",
        "time_budget",
        "progress",
    )
    values = {k: getattr(args, k) for k in keys if hasattr(args, k)}
    if values.get("resume") and getattr(args, "init_from", None):  # the resumed weights would replace them
        raise UsageError(
            f"--init-from {args.init_from} and --resume {values['resume']} both give the starting weights: --resume "
            "continues a run with its own weights, --init-from starts a new one (give one of them)"
        )
    if values.get("resume") and values.get("overwrite"):
        raise UsageError(
            f"--overwrite starts a new run, --resume {values['resume']} continues one in its own folder "
            "(give one of them)"
        )
    if values.get("output") is None and not values.get("resume"):
        values["output"] = getattr(args, "default_output", None)
    return RunConfig(**values, ema_decay=ema)


def task_fields(args: argparse.Namespace, cls: type, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The parsed flags named like fields of the dataclass ``cls`` (its ``run`` and ``skip`` left out)."""
    names = set(cls.__dataclass_fields__) - {"run", *skip}
    return {k: v for k, v in vars(args).items() if k in names}


def is_rank0() -> bool:
    """Whether this process prints the summary (rank 0 under ``torchrun``, or a single process)."""
    return os.environ.get("RANK", "0") == "0"
