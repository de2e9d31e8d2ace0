"""The value types of every setting and flag: each turns a text into a value or refuses it in one line.

Each is an ``argparse`` ``type`` (it raises :class:`argparse.ArgumentTypeError` with the reason, which the command
prints as ``error: argument --flag: REASON``). :class:`Bounded` types also check a value given in Python
(:meth:`Bounded.check`, a ``ValueError``), which :func:`pdevision.engine.config.check_run` applies to a
:class:`~pdevision.engine.config.RunConfig`. The ``pdevision`` command, the tasks' flags and the scripts under
``benchmarks/`` import them from here.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform
from timm.optim import get_optimizer_info

from pdevision._files import inside_library_folder
from pdevision._values import is_finite_number, is_int
from pdevision.engine.metadata import MetadataError, RepeatedKeyError, parse_json, unique_pairs
from pdevision.errors import UsageError
from pdevision.models.factory import MAX_SIZE, RATE_EXPECTED, ModelArgumentError, check_model_args, check_rate

__all__ = [
    "Bounded",
    "TimmOptimizer",
    "auto_augment",
    "batch",
    "bounded",
    "count",
    "device",
    "drop_rate",
    "epochs",
    "figure_side",
    "fraction",
    "json_dict",
    "new_file",
    "non_negative",
    "non_negative_epochs",
    "non_negative_int",
    "open_fraction",
    "optimizer",
    "output_file",
    "output_folder",
    "path",
    "per_epoch",
    "positive",
    "positive_int",
    "rate",
    "rate_below_one",
    "repeats",
    "samples",
    "scenes",
    "seed",
    "side",
    "tile",
    "width",
    "workers",
]


class Bounded:
    """A finite int or float within ``[low, high]`` (``(`` / ``)`` where open): called on a text, an ``argparse``
    type; :meth:`check` on a Python value."""

    def __init__(
        self,
        convert: type[int] | type[float],
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        high_open: bool = False,
        expected: str | None = None,
    ) -> None:
        self.convert, self.low, self.high, self.low_open, self.high_open = convert, low, high, low_open, high_open
        self.__name__ = convert.__name__  # argparse names the type by it
        lo = f"{'(' if low_open else '['}{'-inf' if low is None else low}"
        self.interval = f"{lo}, {'inf' if high is None else high}{')' if high_open else ']'}"
        self.expected = expected or f"{'an integer' if convert is int else 'a number'} in {self.interval}"

    def __repr__(self) -> str:
        return f"Bounded({self.convert.__name__}, {self.interval})"

    def __call__(self, text: str) -> int | float:
        try:
            value = self.convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number in {self.interval}, got {text}")
        if not self.within(value):
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {value}")
        return value

    def within(self, value: float) -> bool:
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        return not (too_low or too_high)

    def check(self, value: Any, name: str) -> None:
        """A ``ValueError`` naming ``name`` unless ``value`` is of the type and in the interval. An infinity passes
        on a side without a bound (an infinite learning rate is the loop's to report: its non-finite stop)."""
        kind_ok = (
            is_int(value) if self.convert is int else isinstance(value, (int, float)) and not isinstance(value, bool)
        )
        unbounded_infinity = kind_ok and math.isinf(value) and (self.high if value > 0 else self.low) is None
        if not (kind_ok and (unbounded_infinity or (is_finite_number(value) and self.within(value)))):
            raise UsageError(f"{name} must be {self.expected}, got {value!r}")


def bounded(
    convert: type[int] | type[float],
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> Bounded:
    """An ``argparse`` type: a finite int or float within ``[low, high]`` (``(`` / ``)`` where open)."""
    return Bounded(convert, low, high, low_open, high_open)


positive_int = Bounded(int, 1, expected="a positive integer")  # any count of at least one


def drop_rate(text: str) -> float:
    """A drop probability (``--drop-path``), by the model side's one check of it
    (:func:`pdevision.models.factory.check_rate`), so the flag and the model argument accept the same rates."""
    try:
        return check_rate(float(text))
    except ValueError:  # not a number, or outside [0, 1) (check_rate's ModelArgumentError is a ValueError)
        raise argparse.ArgumentTypeError(f"must be {RATE_EXPECTED}, got {text!r}") from None


fraction = bounded(float, 0.0, 1.0)  # a probability
open_fraction = bounded(float, 0.0, 1.0, low_open=True, high_open=True)  # a share strictly between 0 and 1
rate_below_one = bounded(float, 0.0, 1.0, high_open=True)  # a rate in [0, 1): EMA decay, label smoothing
non_negative = bounded(float, 0.0)
positive = bounded(float, 0.0, low_open=True)
non_negative_int = bounded(int, 0)
workers = bounded(int, 0, 128)  # data loader processes: a thousand of them hung the machine instead of failing
seed = bounded(int, 0, 2**32 - 1)
side = bounded(int, 1, MAX_SIZE)  # image sides in pixels: beyond this, memory runs out before anything useful
width = bounded(int, 1, 8192)  # channels
count = bounded(int, 1, 1024)  # depths, heads, strides, threads
# counts that cost time or memory in proportion: each bounded where the cost is already absurd, so a typo (or a
# hostile value) is one line at parse time instead of hours of work or terabytes asked of the allocator
epochs = bounded(int, 1, 100_000)
non_negative_epochs = bounded(int, 0, 100_000)
per_epoch = bounded(int, 1, 10_000_000)  # patches, crops, batches drawn per epoch
scenes = bounded(int, 1, 100_000)  # generated scenes, cached in memory (about 44 kB each at 64 px)
samples = bounded(int, 1, 100_000)  # shuffle buffers, images to show or average over
batch = bounded(int, 1, 65_536)  # images in one evaluation or benchmark batch
repeats = bounded(int, 1, 10_000)  # timed repeats, optimisation steps of a figure
tile = bounded(int, 0, MAX_SIZE)  # restore tiles: 0 (whole image) or a side in pixels
figure_side = bounded(int, 1, 2048)  # inputs of random-weight figures (a vHeat at 16384 px builds for minutes)


def device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, checked against this machine."""
    if text == "auto":
        return text
    try:
        found = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (use auto, cpu, cuda, cuda:N or mps)") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text}: CUDA is not available on this machine (use --device cpu)")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif found.type == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"{text}: MPS is not available on this machine (use --device cpu)")
    elif found.type != "cpu":
        raise argparse.ArgumentTypeError(f"unsupported device {text!r} (use auto, cpu, cuda, cuda:N or mps)")
    return text


def path(text: str) -> str:
    """A path (not checked for existence here); an empty one is refused rather than read as ``.``."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class TimmOptimizer:
    """A name of timm's optimizers (``timm.optim.create_optimizer_v2``): sgd, momentum, adamw, lamb, ...; an optional
    ``lookahead_`` prefix adds Lookahead. Called on a text, an ``argparse`` type; :meth:`check` on a Python value."""

    __name__ = "optimizer"

    def __call__(self, text: str) -> str:
        try:  # timm's parse: an optional "lookahead_" prefix, the optimizer's name after the last "_"
            get_optimizer_info(str(text).lower().split("_")[-1])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not one of timm's optimizers (e.g. sgd, momentum, adamw, lamb, lion; "
                "timm.optim.list_optimizers() lists them, a 'lookahead_' prefix adds Lookahead)"
            ) from None
        return text

    def check(self, value: Any, name: str) -> None:
        """A ``ValueError`` naming ``name`` unless ``value`` is such a name."""
        try:
            self(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{name} {exc}") from None


optimizer = TimmOptimizer()


def auto_augment(text: str) -> str:
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


def output_folder(text: str) -> str:
    """A folder to write into: may exist (as a folder) or not, but must not be a file nor lie in a checkpoint."""
    if not text:
        raise argparse.ArgumentTypeError("must name a folder")
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    for parent in folder.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder")
    _outside_checkpoints(text)
    return text


def _outside_checkpoints(text: str) -> None:
    """Refuse a place to write inside a run or checkpoint folder (:func:`pdevision._files.inside_library_folder`)."""
    why = inside_library_folder(text)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{text} {why}; write beside it instead")


def output_file(text: str) -> str:
    """A file to write (restore's output): not empty, and not inside a checkpoint folder."""
    path(text)
    _outside_checkpoints(text)
    return text


def new_file(text: str) -> str:
    """A file to create (``predict --json-out``): not empty, not there yet (a user's file is never overwritten), in
    a folder that exists, and not inside a checkpoint folder."""
    path(text)
    file = Path(text)
    if file.exists() or file.is_symlink():
        raise argparse.ArgumentTypeError(f"{text} exists (it is not overwritten; name a new file)")
    if not file.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {file.parent} does not exist")
    _outside_checkpoints(text)
    return text


def json_dict(text: str) -> dict:
    """``--model-args``: a JSON object of plain constructor arguments (the rules of checkpoint metadata: no weights
    to fetch or read, no URL or path, bounded integers; they are stored in every checkpoint of the run)."""
    try:
        value = parse_json(text)
    except MetadataError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("metadata", "model arguments", 1)) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"depth\": 4}'")
    try:  # within the limits: read once more, each object's keys seen in turn (the last of a repeated key won)
        json.loads(text, object_pairs_hook=unique_pairs)
    except RepeatedKeyError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (give each model argument once)") from None
    if "img_size" in value:  # the task sets it from --img-size / --patch-size; twice was a TypeError at build time
        raise argparse.ArgumentTypeError("img_size is set with --img-size (restoration: --patch-size), not here")
    if "num_classes" in value:  # the task sizes the classifier from the data; twice was a TypeError at build time
        raise argparse.ArgumentTypeError("num_classes is set by the task (the data's classes), not here")
    try:
        return check_model_args(value)
    except ModelArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def rate(text: str) -> float | None:
    """A positive finite number, or ``none`` (no value)."""
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number or 'none', got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number or 'none', got {value}")
    return value
