"""The one reader of checkpoints, whatever their format: metadata in pdevision's vocabulary, and weights.

A command that takes a checkpoint (``train --init-from`` / ``--resume``, ``eval --checkpoint``, ``predict
--checkpoint``, ``export``, ``viz``, ``restore``) accepts:

* ``pdevision``: a checkpoint folder (``model.safetensors`` whose header holds the metadata, ``ema.safetensors``,
  ``trainer.pt``, timm's ``config.json``; written by :mod:`pdevision.engine.save`) or a run folder (its ``best``,
  else its ``last``);
* ``hub``: a timm / Hugging Face folder, ``config.json`` (``architecture``, ``num_classes``, ``label_names``,
  ``model_args``, ``pretrained_cfg``) beside ``model.safetensors`` (or ``pytorch_model.bin``), as ``save_for_hf``
  writes it and the Hub serves it;
* ``timm``: a file of timm's ``train.py`` (``model_best.pth.tar``: ``state_dict``, ``arch``, ``args``, ...);
* ``authors``: a plain PyTorch file of weights (the authors' released ``.pth``, a ``torch.save(model.state_dict())``),
  optionally inside a wrapper key (:data:`pdevision.models._weights.WRAPPER_KEYS`); it names no architecture, so the
  registered model whose layout it has (after the family's ``checkpoint_filter_fn``) is looked for, unless the
  caller names one.

:func:`read_meta` gives the metadata, :func:`load_weights` the weights (in a model's layout) and :func:`resolve` the
folder or file. Files are read with ``safetensors`` or ``torch.load(weights_only=True)`` (timm's
``argparse.Namespace`` of arguments allowed): reading never runs code from the file. Metadata is untrusted whatever
its format: :mod:`pdevision.engine.modeling` checks its model name and arguments and bounds its sizes, and nothing
here downloads (a configuration's URL or hub id is ignored).
"""

from __future__ import annotations

import argparse
import inspect
import io
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import timm
import torch
from safetensors import safe_open
from torch import nn

from pdevision._files import not_a_regular_file
from pdevision._values import is_finite_number, is_int
from pdevision.engine.metadata import MAX_METADATA_BYTES, MetadataError, parse_json
from pdevision.engine.runtime import one_line
from pdevision.models import FAMILIES, list_models
from pdevision.models._arguments import (
    MAX_CLASSES,
    MAX_SIZE,
    ModelArgumentError,
    check_model_args,
    valid_image_size,
)
from pdevision.models._weights import HEAD_KEYS, unwrap_state_dict

__all__ = [
    "FORMATS",
    "NO_CHECKPOINT_YET",
    "CheckpointError",
    "check_finite_weights",
    "check_normalisation",
    "checkpoint_filter_of",
    "checkpoint_format",
    "checkpoint_kind",
    "default_eval_output",
    "label_names",
    "load_trainer_state",
    "load_weights",
    "parse_checkpoint_metadata",
    "read_meta",
    "regular_checkpoint_file",
    "resolve",
    "resolve_checkpoint",
    "resumed_run_folder",
]

FORMATS = ("pdevision", "hub", "timm", "authors")
_HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the model."""


def resolve_checkpoint(path: str | Path, prefer: tuple[str, ...] = ("best", "last")) -> Path:
    """The checkpoint folder for ``path``: a folder, its ``model.safetensors``, or a run folder (the
    first of ``prefer`` present: ``best`` then ``last`` to evaluate, ``last`` alone to resume); falls
    back to ``.<name>.old`` after an interrupted swap."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".safetensors"):
        path = path.parent
    if path.is_dir() and not (path / "model.safetensors").exists():
        for name in prefer:
            for folder in (path / name, path / f".{name}.old"):
                if (folder / "model.safetensors").exists():
                    return folder
    if not (path / "model.safetensors").exists():
        old = path.parent / f".{path.name}.old"
        if (old / "model.safetensors").exists():
            return old
        raise CheckpointError(f"no checkpoint at {path} (expected a folder with model.safetensors)")
    return path


def resumed_run_folder(path: str | Path) -> Path | None:
    """The run folder a ``--resume`` path continues: the folder holding the ``last/`` checkpoint that ``path``
    resolves to (``RUN``, ``RUN/last`` or ``RUN/.last.old``), or ``None`` for a checkpoint folder of another name,
    which belongs to no run. A run folder with a recipe but no checkpoint (a run stopped before its first save) is
    a :class:`CheckpointError` that says there is nothing to resume, as a new run into it says."""
    path = Path(path)
    try:
        folder = resolve_checkpoint(path, prefer=("last",))
    except CheckpointError:
        if path.is_dir() and (path / "config.json").is_file():
            raise CheckpointError(f"{path} {NO_CHECKPOINT_YET}") from None
        raise
    return folder.parent if folder.name in ("last", ".last.old") else None


# a run folder with a recipe but no checkpoint: what `train --output` and `--resume` both say of it
NO_CHECKPOINT_YET = (
    "holds a run that stopped before its first checkpoint (config.json, no last/): there is nothing to resume; "
    "start over in it with --overwrite, or give another --output"
)


def regular_checkpoint_file(file: Path) -> Path:
    """``file``; a :class:`CheckpointError` if it is a FIFO, device or folder (reading one would block forever)."""
    what = not_a_regular_file(file)
    if what is not None:
        raise CheckpointError(f"checkpoint file {file} is {what}, not a regular file")
    return file


def default_eval_output(folder: str | Path) -> Path:
    """Where evaluation results of the checkpoint ``folder`` go by default: beside it, never inside it (the next
    save of ``RUN/best/`` replaces that folder whole): ``RUN/eval-best/`` for ``RUN/best/``."""
    folder = Path(folder)
    name = folder.name
    if name.startswith(".") and name.endswith(".old"):  # the fallback of an interrupted save
        name = name[1:-4]
    return folder.parent / f"eval-{name}"


# ---- which format, and where ----


def _header(file: Path) -> dict[str, str]:
    """The metadata of a safetensors file's header (the file is not read further)."""
    try:
        with safe_open(str(regular_checkpoint_file(file)), framework="pt") as f:
            return f.metadata() or {}
    except CheckpointError:
        raise
    except Exception as exc:  # safetensors raises its own error type for truncated or garbage files
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from exc


def _is_native(folder: Path) -> bool:
    """Whether ``folder/model.safetensors`` is pdevision's (its header holds metadata of its own; a corrupt one too:
    the native reader reports it)."""
    file = folder / "model.safetensors"
    if not file.is_file():
        return False
    try:
        raw = _header(file)
    except CheckpointError:
        if not_a_regular_file(file) is not None:
            raise
        return True
    return bool(set(raw) - {"format"})  # safetensors' own writers record {"format": "pt"} alone


def checkpoint_format(path: str | Path) -> str:
    """Which of :data:`FORMATS` ``path`` is; a :class:`CheckpointError` when it is none of them."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".safetensors"):
        if path.name != "model.safetensors":  # its folder is not the checkpoint: say so, not "no checkpoint at .."
            raise CheckpointError(
                f"{path}: a .safetensors file is read as the model.safetensors of a checkpoint folder or of a timm / "
                "Hugging Face folder (beside its config.json); name the folder"
            )
        path = path.parent
    if path.is_dir():
        if _is_native(path):
            return "pdevision"
        config = path / "config.json"
        if not_a_regular_file(config) is not None:  # a FIFO would block the reader, a folder is no config
            regular_checkpoint_file(config)
        if config.is_file() and any((path / w).is_file() for w in _HUB_WEIGHTS):
            return "hub"
        if (path / "model.safetensors").is_file():
            raise CheckpointError(
                f"{path / 'model.safetensors'} names no model: its header holds no pdevision metadata and no timm "
                f"config.json is beside it (expected a checkpoint folder, or a timm / Hugging Face folder)"
            )
        resolve_checkpoint(path)  # a run folder (its best / last), or its own message
        return "pdevision"
    if path.is_file():
        regular_checkpoint_file(path)
        obj = _torch_file(path)
        return "timm" if isinstance(obj.get("arch"), str) and isinstance(obj.get("state_dict"), dict) else "authors"
    what = not_a_regular_file(path)
    if what is not None:
        raise CheckpointError(f"checkpoint {path} is {what}, not a checkpoint file or folder")
    raise CheckpointError(
        f"no checkpoint at {path} (expected a checkpoint or run folder, a timm / Hugging Face folder with config.json "
        "and model.safetensors, a timm .pth.tar or a .pth file of weights)"
    )


def resolve(path: str | Path) -> Path:
    """The folder of a pdevision checkpoint (a run folder: its ``best``), or the foreign file or folder itself."""
    if checkpoint_format(path) == "pdevision":
        return resolve_checkpoint(path)
    path = Path(path)
    return path.parent if path.is_file() and path.name.endswith(".safetensors") else path


# ---- metadata ----


def parse_checkpoint_metadata(raw: dict[str, str], file: str | Path) -> dict[str, Any]:
    """The values of a safetensors header's metadata, each parsed as JSON by the one bounded reader
    (:func:`pdevision.engine.metadata.parse_json`: at most :data:`MAX_METADATA_BYTES` in all, nested at most
    :data:`MAX_JSON_DEPTH` deep); anything else is a :class:`CheckpointError` naming ``file``."""
    total = sum(len(k) + len(v) for k, v in raw.items())
    if total > MAX_METADATA_BYTES:
        raise CheckpointError(
            f"checkpoint file {file} has {total:,} characters of metadata, above the limit of {MAX_METADATA_BYTES:,}"
        )
    meta = {}
    for key, value in raw.items():
        try:
            meta[key] = parse_json(value)
        except MetadataError as exc:
            raise CheckpointError(f"checkpoint file {file} has {key!r:.40} {exc}") from None
    return meta


def check_normalisation(meta: dict[str, Any], file: str | Path) -> None:
    """A :class:`CheckpointError` unless the metadata's ``mean`` and ``std`` (where present) are lists of finite
    numbers, one per input channel (or one for all), with every ``std`` above zero."""
    args = meta.get("model_args")
    chans = args.get("in_chans") if isinstance(args, dict) and "in_chans" in args else meta.get("in_chans", 3)
    for name in ("mean", "std"):
        if name not in meta:
            continue
        value = meta[name]
        ok = (
            isinstance(value, list)
            and len(value) in (1, chans)
            and all(is_finite_number(v) for v in value)
            and (name == "mean" or all(v > 1e-6 for v in value))
        )
        if not ok:
            raise CheckpointError(
                f"checkpoint file {file}: its {name} must be a list of {chans} finite numbers"
                + (" above zero" if name == "std" else "")
                + f", got {value!r:.80}"
            )


def _native_read_meta(path: str | Path) -> dict[str, Any]:
    """The metadata stored with a checkpoint's weights (model name, classes, arguments, epoch)."""
    file = resolve_checkpoint(path) / "model.safetensors"
    meta = parse_checkpoint_metadata(_header(file), file)
    classes = meta.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise CheckpointError(f"checkpoint file {file}: its classes must be a list of names, got {classes!r:.80}")
    if "kind" in meta and not isinstance(meta["kind"], str):
        raise CheckpointError(f"checkpoint file {file}: its kind must be a task name, got {meta['kind']!r:.80}")
    check_normalisation(meta, file)
    if meta.get("kind") in ("segment", "detect") and not isinstance(meta.get("head"), str):
        raise CheckpointError(f"checkpoint file {file} is a {meta['kind']} checkpoint without its head in the metadata")
    return meta


def _defaults(name: str) -> dict[str, Any]:
    """Image size, mean and std of the model's pretrained config (224 px and ImageNet's when it has none)."""
    cfg = timm.models.get_pretrained_cfg(name) if timm.is_model(name) else None
    mean = tuple(getattr(cfg, "mean", None) or timm.data.IMAGENET_DEFAULT_MEAN)
    std = tuple(getattr(cfg, "std", None) or timm.data.IMAGENET_DEFAULT_STD)
    size = int((getattr(cfg, "input_size", None) or (3, 224, 224))[-1])
    return {"img_size": size, "mean": [float(v) for v in mean], "std": [float(v) for v in std]}


def _foreign_meta(name: str, num_classes: int, fmt: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "model": name,
        "kind": "classify" if num_classes else "encoder",
        "classes": None,
        "num_classes": num_classes,
        "model_args": {},
        "format": fmt,
        **_defaults(name),
    }
    meta.update({k: v for k, v in extra.items() if v is not None})
    return meta


def _is_count(value: Any) -> bool:
    """Whether ``value`` is a number of classes a model can have (an int from 0 to ``MAX_CLASSES``)."""
    return is_int(value) and 0 <= value <= MAX_CLASSES


def _label_names(labels: Any, num_classes: int, file: Path) -> list[str] | None:
    """A Hugging Face folder's ``label_names`` (a list, or timm's ``{index: name}``): ``None`` when absent, else a
    list of ``num_classes`` strings, or a :class:`CheckpointError` (class names that do not name the classifier's
    outputs would be printed against the wrong ones)."""
    if labels is None:
        return None
    if isinstance(labels, dict):
        if len(labels) == num_classes:
            labels = [labels.get(str(i), labels.get(i)) for i in range(num_classes)]  # type: ignore[call-overload]
    if not (isinstance(labels, list) and len(labels) == num_classes and all(isinstance(c, str) for c in labels)):
        raise CheckpointError(
            f"{file}: label_names must be a list of {num_classes} class names (strings), one per output of the "
            f"classifier, got {labels!r:.80}"
        )
    return labels or None


def _hub_meta(folder: Path) -> dict[str, Any]:
    file = regular_checkpoint_file(folder / "config.json")
    try:
        config = parse_json(file.read_text())  # untrusted: bounded in size and nesting
    except (OSError, UnicodeDecodeError, MetadataError) as exc:
        raise CheckpointError(f"{file} is not a JSON model config ({one_line(exc, first=True)})") from None
    if not isinstance(config, dict) or not isinstance(config.get("architecture"), str):
        raise CheckpointError(f"{file} names no architecture (a timm config.json has an 'architecture' field)")
    cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    num_classes = config.get("num_classes", cfg.get("num_classes", 0))
    if not _is_count(num_classes):
        raise CheckpointError(
            f"{file}: num_classes must be a whole number from 0 to {MAX_CLASSES:,}, got {num_classes!r:.80}"
        )
    classes = _label_names(config.get("label_names", cfg.get("label_names")), num_classes, file)
    args = config.get("model_args") if isinstance(config.get("model_args"), dict) else {}
    size = cfg.get("input_size")
    img_size = args.get("img_size") or (size[-1] if isinstance(size, list) and len(size) == 3 else None)
    if isinstance(img_size, list) and len(img_size) == 2 and img_size[0] == img_size[1]:
        img_size = img_size[0]  # timm records a square size as a pair
    meta = _foreign_meta(config["architecture"], num_classes, "hub", classes=classes, img_size=img_size)
    meta["model_args"] = {k: v for k, v in args.items() if k != "num_classes"}  # timm records it there too
    if "img_size" in meta["model_args"]:
        meta["model_args"]["img_size"] = img_size
    for key in ("mean", "std"):
        if isinstance(cfg.get(key), list):
            meta[key] = cfg[key]
    return meta


def _plain(value: Any) -> bool:
    """Whether ``value`` is a plain JSON-like value (``None``, a bool, number or string, or a list / tuple of them)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _timm_args(obj: dict[str, Any], file: Path) -> dict[str, Any]:
    """The arguments of a timm ``train.py`` file that say how to rebuild and feed its model (``img_size``,
    ``input_size``, ``in_chans``, ``mean``, ``std``) from its ``args`` (an ``argparse.Namespace`` or a dict); each
    must be a plain JSON-like value (a tensor or another object is refused, naming the key)."""
    args = obj.get("args")
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    keys = ("img_size", "input_size", "in_chans", "mean", "std")
    if not isinstance(args, dict):
        return dict.fromkeys(keys)
    found = {key: args.get(key) for key in keys}
    for key, value in found.items():
        if not _plain(value):
            raise CheckpointError(
                f"checkpoint file {file}: its args.{key} must be a plain value (a number, or a list of numbers), "
                f"got a {type(value).__name__}"
            )
    return found


def _timm_meta(obj: dict[str, Any], rows: int, file: Path) -> dict[str, Any]:
    """The metadata of a file of timm's ``train.py``: its ``arch``, and from its ``args`` the image size, mean, std
    and input channels; a mean and std left at their defaults become one value for all channels when the model takes
    other than 3."""
    args = _timm_args(obj, file)
    size = args["input_size"]
    img_size = args["img_size"] or (size[-1] if isinstance(size, (list, tuple)) and size else None)
    meta = _foreign_meta(obj["arch"], rows, "timm", img_size=img_size)
    in_chans = args["in_chans"]
    if in_chans is not None and in_chans != 3:
        meta["model_args"] = {"in_chans": in_chans}  # checked with the other model arguments
    for key in ("mean", "std"):
        value = args[key]
        if isinstance(value, (list, tuple)):
            meta[key] = list(value)
        elif in_chans is not None and in_chans != 3:
            meta[key] = [sum(meta[key]) / len(meta[key])]
    check_normalisation(meta, file)
    return meta


def _check_sizes(meta: dict[str, Any], file: str | Path) -> None:
    """Bound the sizes a checkpoint's metadata gives, whatever its format, where they enter: the image size and input
    channels of the model arguments (:func:`pdevision.models._arguments.check_model_args`), the image size (an
    integer, or a pair, from 1 to :data:`~pdevision.models._arguments.MAX_SIZE`) and the number of classes (0 to
    :data:`~pdevision.models._arguments.MAX_CLASSES`)."""
    args = meta.get("model_args") if isinstance(meta.get("model_args"), dict) else {}
    try:  # the sizes only: the other arguments are checked where a model is built (engine.modeling), after the
        # metadata has chosen the command's task
        check_model_args({k: args[k] for k in ("img_size", "in_chans") if k in args}, "in the checkpoint")
    except ModelArgumentError as exc:
        raise CheckpointError(f"checkpoint {file}: {exc}") from exc
    value = meta.get("img_size")
    if value is not None and not valid_image_size(value):
        raise CheckpointError(
            f"checkpoint {file}: image size {value!r:.80} in the checkpoint is not an integer from 1 to {MAX_SIZE} "
            "or a (height, width) pair of them"
        )
    if "num_classes" in meta and meta["num_classes"] is not None and not _is_count(meta["num_classes"]):
        raise CheckpointError(
            f"checkpoint {file}: its num_classes must be a whole number from 0 to {MAX_CLASSES:,}, "
            f"got {meta['num_classes']!r:.80}"
        )


def read_meta(path: str | Path, model: str | None = None) -> dict[str, Any]:
    """The metadata of any checkpoint :data:`FORMATS` names, in pdevision's vocabulary (``model``, ``kind``,
    ``classes`` or ``None`` with ``num_classes``, ``model_args``, ``img_size``, ``mean``, ``std``) plus ``format``.

    ``model``: the architecture of a file that names none (``--init-from`` with ``--model``); without it the
    registered model whose layout the weights have is looked for."""
    fmt = checkpoint_format(path)
    path = Path(path)
    if fmt == "pdevision":
        meta = {**_native_read_meta(path), "format": fmt}
    elif fmt == "hub":
        meta = _hub_meta(resolve(path))
        check_normalisation(meta, resolve(path) / "config.json")
    else:
        obj = _torch_file(path)
        state = _tensors(obj, path)
        rows = _head_rows(state)
        if fmt == "timm":
            meta = _timm_meta(obj, rows, path)
        else:
            meta = _foreign_meta(model or _find_architecture(state, rows, path), rows, fmt)
    _check_sizes(meta, path)
    return meta


# kinds of checkpoints written before every checkpoint named its task: restoration runs wrote "restoration" and
# their task under "task"; classification runs wrote no kind
def checkpoint_kind(meta: dict[str, Any]) -> str | None:
    """The task a checkpoint belongs to (its ``kind``; ``encoder`` for a pretraining export), or ``None``."""
    kind = meta.get("kind")
    if kind == "restoration":
        return meta.get("task") if isinstance(meta.get("task"), str) else None
    if kind is None and meta.get("classes") is not None:
        return "classify"
    return kind if isinstance(kind, str) else None


def label_names(meta: dict[str, Any]) -> list[str]:
    """The class names of a checkpoint: its own, else ImageNet-1K's synsets for 1000 classes, else the indices."""
    if meta.get("classes"):
        return list(meta["classes"])
    count = meta.get("num_classes") or 0
    if not _is_count(count):  # a list of a trillion indices would fill the memory
        raise CheckpointError(
            f"the checkpoint's num_classes must be a whole number from 0 to {MAX_CLASSES:,}, got {count!r:.80}"
        )
    if count == 1000:
        return list(timm.data.ImageNetInfo().label_names())
    return [str(i) for i in range(count)]


# ---- weights ----


def _torch_file(file: Path) -> dict[str, Any]:
    """A PyTorch file read with ``weights_only=True``; a :class:`CheckpointError` unless it holds a dict."""
    if file.stat().st_size == 0:
        raise CheckpointError(f"checkpoint file {file} is empty")
    try:
        # torch's unpickler warns on stderr about a raw pickle's protocol before it refuses the file: the refusal is
        # one line, said below
        with torch.serialization.safe_globals([argparse.Namespace]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(str(file), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if found is None:
            raise CheckpointError(f"checkpoint file {file} cannot be read as a PyTorch file of weights") from None
        raise CheckpointError(
            f"checkpoint file {file} holds objects other than weights ({found[1]}); it is read with weights_only=True, "
            "which never runs code from a file"
        ) from None
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint file {file} cannot be read as a PyTorch file of weights ({one_line(exc, first=True)})"
        ) from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint file {file} holds a {type(obj).__name__}, not a dict of weights")
    return obj


def _tensors(obj: dict[str, Any], file: Path) -> dict[str, torch.Tensor]:
    """The state dict inside a PyTorch checkpoint (:func:`~pdevision.models._weights.unwrap_state_dict`)."""
    state = unwrap_state_dict(obj)
    if not state:
        raise CheckpointError(f"checkpoint file {file} holds no tensors")
    return state


def _head_rows(state: dict[str, torch.Tensor]) -> int:
    for head in HEAD_KEYS:
        if head in state and state[head].ndim == 2:
            return int(state[head].shape[0])
    return 0


def checkpoint_filter_of(model: nn.Module) -> Callable[[dict[str, Any], nn.Module], dict[str, Any]] | None:
    """The ``checkpoint_filter_fn`` of the module that defines ``model``'s class (timm's convention), if any."""
    module = inspect.getmodule(type(model))
    fn = getattr(module, "checkpoint_filter_fn", None)
    return fn if callable(fn) else None


def _fits(name: str, state: dict[str, torch.Tensor], num_classes: int) -> bool:
    """Whether ``state`` (after the family's filter) has exactly the keys and shapes of ``name`` (built on the meta
    device: no memory, no weights)."""
    try:
        with torch.device("meta"):
            model = timm.create_model(name, num_classes=num_classes)
        fn = checkpoint_filter_of(model)
        converted = fn(dict(state), model) if fn else state
    except Exception:  # another family's layout: its filter or build fails
        return False
    own = model.state_dict()
    return set(converted) == set(own) and all(tuple(v.shape) == tuple(own[k].shape) for k, v in converted.items())


def _candidate(name: str, state: dict[str, torch.Tensor]) -> bool:
    """Whether ``name`` may have ``state``'s layout: its first conv is there, or its family converts other layouts
    (a ``checkpoint_filter_fn``); the others are not built."""
    cfg = timm.models.get_pretrained_cfg(name)
    first = getattr(cfg, "first_conv", None)
    if isinstance(first, str) and f"{first}.weight" in state:
        return True
    return callable(getattr(inspect.getmodule(timm.models.model_entrypoint(name)), "checkpoint_filter_fn", None))


def _find_architecture(state: dict[str, torch.Tensor], num_classes: int, file: Path) -> str:
    for name in list_models():
        if _candidate(name, state) and _fits(name, state, num_classes):
            return name
    raise CheckpointError(
        f"checkpoint file {file} holds weights of none of the registered models ({', '.join(FAMILIES)} families, "
        "default configurations); fine-tune it with `pdevision train --model NAME [--model-args ...] --init-from` "
        f"{file}"
    )


def _safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return safetensors.torch.load_file(str(regular_checkpoint_file(file)))
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from None


def load_weights(path: str | Path, model: nn.Module | None = None, ema: bool = False) -> dict[str, torch.Tensor]:
    """The weights of any checkpoint :data:`FORMATS` names. A pdevision checkpoint's as stored (its EMA copy with
    ``ema=True`` where there is one); a foreign one's in ``model``'s layout, through the family's
    ``checkpoint_filter_fn`` (which resamples vHeat's FVEs, folds a folded checkpoint)."""
    fmt = checkpoint_format(path)
    path = Path(path)
    if fmt == "pdevision":
        folder = resolve_checkpoint(path)
        ema_file = folder / "ema.safetensors"
        return _safetensors(ema_file if ema and ema_file.exists() else folder / "model.safetensors")
    if fmt == "hub":
        folder = resolve(path)
        if (folder / "model.safetensors").is_file():
            state = _safetensors(folder / "model.safetensors")
        else:
            bin_file = regular_checkpoint_file(folder / "pytorch_model.bin")
            state = _tensors(_torch_file(bin_file), bin_file)
    else:
        state = _tensors(_torch_file(path), path)
    fn = checkpoint_filter_of(model) if model is not None else None
    if fn is not None:
        try:
            state = fn(state, model)
        except (KeyError, RuntimeError, ValueError, IndexError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit {type(model).__name__}: {one_line(exc)}") from None
    return state


def check_finite_weights(state: dict[str, torch.Tensor], folder: str | Path) -> None:
    """A :class:`CheckpointError` naming the first tensor with a NaN or infinite value."""
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"checkpoint {folder} holds non-finite weights (first: {key}); refused")


def _is_pickle(file: Path) -> bool:
    """Whether ``file`` parses as a pickle stream (its opcodes read, never executed)."""
    try:
        with open(file, "rb") as f:
            ops = list(pickletools.genops(io.BytesIO(f.read(1 << 26))))
    except Exception:  # not a pickle: pickletools raises ValueError, struct.error, ... on bad opcodes
        return False
    return bool(ops) and ops[-1][0].name == "STOP"


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Trainer state (optimizer, scheduler, RNG, epoch), read with ``weights_only=True``."""
    folder = resolve_checkpoint(path)
    file = folder / "trainer.pt"
    if not file.exists():
        raise CheckpointError(f"checkpoint {folder} has no trainer state (trainer.pt); it cannot be resumed")
    regular_checkpoint_file(file)
    # torch.save writes a zip archive; anything else (a raw pickle, which may carry code) is refused unread, before
    # torch's fallback to its legacy format, which warns on stderr and then fails on the pickle's first opcode
    if not zipfile.is_zipfile(file):
        if _is_pickle(file):
            raise CheckpointError(
                f"checkpoint file {file} was refused: it is a raw pickle, not a weights file written by torch.save "
                "(it was not loaded)"
            )
        raise CheckpointError(
            f"checkpoint file {file} is corrupt or truncated (not a zip archive as torch.save writes)"
        )
    try:
        with warnings.catch_warnings():  # torch's advice to load with weights_only=False would run the file's code
            warnings.simplefilter("ignore")
            state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()]
        # PyTorch writes "WeightsUnpickler error:" with the reason on the same line or on a later one
        at = next((i for i, ln in enumerate(lines) if "Unpickler error:" in ln), None)
        after = [ln.split("error:", 1)[-1].strip() if i == at else ln for i, ln in enumerate(lines)][at or 0 :]
        reason = next((ln for ln in after if ln), "") if at is not None else ""
        if "global" in reason.lower():
            raise CheckpointError(
                f"checkpoint file {file} holds objects other than tensors and plain containers; it was not loaded "
                f"(weights-only load refused: {reason})"
            ) from exc
        # (never PyTorch's first line: it advises loading with weights_only=False, which would run the file's code)
        raise CheckpointError(
            f"checkpoint file {file} is corrupt or truncated ({reason or 'not a weights file'})"
        ) from exc
    except Exception as exc:  # truncated zip archive, garbage bytes
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint file {file} holds a {type(state).__name__}, not the trainer state (a dict)")
    return state
