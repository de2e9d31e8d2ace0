"""Reading the checkpoints users have, in pdevision's metadata vocabulary.

A command that takes a checkpoint (``train --init-from``, ``eval --checkpoint``, ``predict --checkpoint``,
``export``) accepts:

* ``pdevision``: a checkpoint folder or a run folder (:mod:`pdevision.engine.checkpoint`);
* ``hub``: a timm / Hugging Face folder, ``config.json`` (``architecture``, ``num_classes``, ``label_names``,
  ``model_args``, ``pretrained_cfg``) beside ``model.safetensors`` (or ``pytorch_model.bin``), as ``save_for_hf``
  writes it and the Hub serves it;
* ``timm``: a file of timm's ``train.py`` (``model_best.pth.tar``: ``state_dict``, ``arch``, ``args``, ...);
* ``authors``: a plain PyTorch file of weights (the authors' released ``.pth``, a ``torch.save(model.state_dict())``),
  optionally inside ``model`` / ``model_ema`` / ``state_dict``; it names no architecture, so the registered model
  whose layout it has (after the family's ``checkpoint_filter_fn``) is looked for, unless the caller names one.

Files are read with ``safetensors`` or ``torch.load(weights_only=True)`` (timm's ``argparse.Namespace`` of
arguments allowed): reading never runs code from the file. A foreign checkpoint's metadata is untrusted like any
other: :mod:`pdevision.engine.modeling` checks its model name and arguments and bounds its sizes, and nothing here
downloads (a configuration's URL or hub id is ignored). Foreign weights pass through the family's
``checkpoint_filter_fn`` (timm's ``pretrained_filter_fn``) before the strict load.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import timm
import torch
from safetensors import safe_open
from torch import nn

from pdevision._files import not_a_regular_file
from pdevision._values import is_int
from pdevision.engine import checkpoint as native
from pdevision.engine.checkpoint import CheckpointError, check_normalisation, regular_checkpoint_file
from pdevision.engine.metadata import MetadataError, parse_json
from pdevision.engine.runtime import one_line
from pdevision.models import FAMILIES, list_models
from pdevision.models._arguments import MAX_CLASSES

__all__ = [
    "FORMATS",
    "checkpoint_filter_of",
    "checkpoint_format",
    "label_names",
    "load_weights",
    "read_meta",
    "resolve",
]

log = logging.getLogger(__name__)

FORMATS = ("pdevision", "hub", "timm", "authors")
_HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".tar", ".ckpt")
_HEAD_KEYS = ("head.fc.weight", "classifier.3.weight", "head.weight", "fc.weight", "classifier.weight")
_WRAPPERS = ("state_dict", "model", "model_ema", "state_dict_ema")


def _native_meta(folder: Path) -> dict[str, Any] | None:
    """The safetensors metadata of ``folder/model.safetensors`` when it is pdevision's (names its model)."""
    file = folder / "model.safetensors"
    if not file.is_file():
        return None
    try:
        with safe_open(str(regular_checkpoint_file(file)), framework="pt") as f:
            raw = f.metadata() or {}
    except CheckpointError:
        raise
    except Exception:  # a corrupt file: the native reader reports it
        return {}
    return raw if "model" in raw or "kind" in raw else None


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
        if _native_meta(path) is not None:
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
        native.resolve_checkpoint(path)  # a run folder (its best / last), or its own message
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
        return native.resolve_checkpoint(path)
    path = Path(path)
    return path.parent if path.is_file() and path.name.endswith(".safetensors") else path


def _torch_file(file: Path) -> dict[str, Any]:
    """A PyTorch file read with ``weights_only=True``; a :class:`CheckpointError` unless it holds a dict."""
    if file.stat().st_size == 0:
        raise CheckpointError(f"checkpoint file {file} is empty")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
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
    """The state dict inside a PyTorch checkpoint (``state_dict`` / ``model`` / ``model_ema`` or the dict itself),
    without DDP's ``module.`` prefix."""
    for key in _WRAPPERS:
        if isinstance(obj.get(key), dict) and obj[key]:  # an empty ``model`` beside a full ``model_ema``
            obj = obj[key]
            break
    state = {k.removeprefix("module."): v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    if not state:
        raise CheckpointError(f"checkpoint file {file} holds no tensors")
    return state


def _head_rows(state: dict[str, torch.Tensor]) -> int:
    for head in _HEAD_KEYS:
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
    labels = config.get("label_names", cfg.get("label_names"))
    if isinstance(labels, dict):  # timm allows {index: name}
        labels = [labels.get(str(i), labels.get(i)) for i in range(num_classes)]  # type: ignore[call-overload]
    classes = (
        [str(c) for c in labels] if isinstance(labels, list) and len(labels) == num_classes and num_classes else None
    )
    args = config.get("model_args") if isinstance(config.get("model_args"), dict) else {}
    size = cfg.get("input_size")
    img_size = args.get("img_size") or (size[-1] if isinstance(size, list) and len(size) == 3 else None)
    meta = _foreign_meta(config["architecture"], num_classes, "hub", classes=classes, img_size=img_size)
    meta["model_args"] = {k: v for k, v in args.items() if k != "num_classes"}  # timm records it there too
    if isinstance(img_size, list) and len(img_size) == 2 and img_size[0] == img_size[1]:
        img_size = img_size[0]  # timm records a square size as a pair
    for where in (meta, meta["model_args"]):
        if "img_size" in where or where is meta:
            where["img_size"] = img_size
    for key in ("mean", "std"):
        if isinstance(cfg.get(key), list):
            meta[key] = cfg[key]
    return meta


def _timm_meta(obj: dict[str, Any], rows: int, file: Path) -> dict[str, Any]:
    """The metadata of a file of timm's ``train.py``: its ``arch``, and from its ``args`` (an ``argparse.Namespace``,
    or a dict) the image size, mean, std and input channels; a mean and std left at their defaults become one value
    for all channels when the model takes other than 3."""
    args = obj.get("args")
    get = args.get if isinstance(args, dict) else lambda key: getattr(args, key, None)
    size = get("input_size")
    img_size = get("img_size") or (size[-1] if isinstance(size, (list, tuple)) and size else None)
    meta = _foreign_meta(obj["arch"], rows, "timm", img_size=img_size)
    in_chans = get("in_chans")
    if in_chans is not None and in_chans != 3:
        meta["model_args"] = {"in_chans": in_chans}  # checked with the other model arguments
    for key in ("mean", "std"):
        value = get(key)
        if isinstance(value, (list, tuple)):
            meta[key] = list(value)
        elif in_chans is not None and in_chans != 3:
            meta[key] = [sum(meta[key]) / len(meta[key])]
    check_normalisation(meta, file)
    return meta


def read_meta(path: str | Path, model: str | None = None) -> dict[str, Any]:
    """The metadata of any checkpoint :data:`FORMATS` names, in pdevision's vocabulary (``model``, ``kind``,
    ``classes`` or ``None`` with ``num_classes``, ``model_args``, ``img_size``, ``mean``, ``std``) plus ``format``.

    ``model``: the architecture of a file that names none (``--init-from`` with ``--model``); without it the
    registered model whose layout the weights have is looked for."""
    fmt = checkpoint_format(path)
    path = Path(path)
    if fmt == "pdevision":
        return {**native.read_meta(path), "format": fmt}
    if fmt == "hub":
        meta = _hub_meta(resolve(path))
        check_normalisation(meta, resolve(path) / "config.json")
        return meta
    obj = _torch_file(path)
    state = _tensors(obj, path)
    rows = _head_rows(state)
    if fmt == "timm":
        return _timm_meta(obj, rows, path)
    return _foreign_meta(model or _find_architecture(state, rows, path), rows, fmt)


def load_weights(path: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights of any checkpoint :data:`FORMATS` names, in ``model``'s layout: a pdevision checkpoint's as
    stored; a foreign one's through the family's ``checkpoint_filter_fn`` (which resamples vHeat's FVEs, folds a
    folded checkpoint)."""
    fmt = checkpoint_format(path)
    path = Path(path)
    if fmt == "pdevision":
        return native.load_weights(path)
    if fmt == "hub":
        folder = resolve(path)
        file = folder / "model.safetensors"
        if file.is_file():
            try:
                state = safetensors.torch.load_file(str(regular_checkpoint_file(file)))
            except Exception as exc:
                raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc)})") from None
        else:
            state = _tensors(
                _torch_file(regular_checkpoint_file(folder / "pytorch_model.bin")), folder / "pytorch_model.bin"
            )
    else:
        state = _tensors(_torch_file(path), path)
    fn = checkpoint_filter_of(model)
    if fn is not None:
        try:
            state = fn(state, model)
        except (KeyError, RuntimeError, ValueError, IndexError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit {type(model).__name__}: {one_line(exc)}") from None
    return state


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
