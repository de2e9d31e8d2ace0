"""timm pretrained configs shared by the model families; the wrapper keys of a checkpoint file, unwrapped in one place
(for every family's ``checkpoint_filter_fn`` and for :mod:`pdevision.engine.checkpoint`); and reading a local weights
file's classifier size so that a trained head is kept when weights load from a local file."""

from __future__ import annotations

import argparse
import os
import pickle
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from safetensors import safe_open
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models._builder import resolve_pretrained_cfg

from pdevision._files import not_a_regular_file

# Classifier weights of this library's models, of the vHeat authors' checkpoints and of other timm models.
HEAD_KEYS = ("head.fc.weight", "classifier.3.weight", "head.weight", "fc.weight", "classifier.weight")
# The keys a training script wraps a state dict in, in the order they are chosen: EMA weights first, as timm does.
WRAPPER_KEYS = ("model_ema", "state_dict_ema", "state_dict", "model")


def unwrap_state_dict(state_dict: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint (inside the first non-empty of :data:`WRAPPER_KEYS` when there), without DDP's
    ``module.``; entries that are not named tensors are left out. A ``TypeError`` naming what was given when it is not
    a dict."""
    if not isinstance(state_dict, dict):
        raise TypeError(
            f"checkpoint_filter_fn takes a state dict (names to tensors), not a {type(state_dict).__name__}"
        )
    for key in WRAPPER_KEYS:
        if isinstance(state_dict.get(key), dict) and state_dict[key]:  # an empty ``model`` beside a full ``model_ema``
            state_dict = state_dict[key]
            break
    return {
        k.removeprefix("module."): v
        for k, v in state_dict.items()
        if isinstance(k, str) and isinstance(v, torch.Tensor)  # an integer key had no removeprefix
    }


_TRUE = ("1", "true", "yes", "on")


class ReleasedWeightsUnavailableError(RuntimeError):
    """Released weights asked for by name (``pretrained=True``) that cannot be had: offline, not in timm's cache."""


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no downloads (the Hugging Face setting, honoured for every release)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def cached_release(url: str) -> Path:
    """Where timm's cache keeps the file of ``url``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def release_advice(url: str, file: Path) -> str:
    """What to do without a network: the same words in Python and on the command line."""
    return f"without a network, put the file {url} at {file}, or start from a local file"


def check_release_offline(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> None:
    """Before timm tries a download: released weights asked for by name while ``HF_HUB_OFFLINE`` is set and their
    file is not in timm's cache are a :class:`ReleasedWeightsUnavailableError` in one line (the command line's
    words), not a download attempt and a long traceback."""
    overlay = kwargs.get("pretrained_cfg_overlay") or {}
    if not pretrained or not offline() or overlay.get("file") or overlay.get("state_dict"):
        return
    cfg = resolve_pretrained_cfg(variant, pretrained_cfg=kwargs.get("pretrained_cfg"), pretrained_cfg_overlay=overlay)
    url = cfg.url if cfg is not None else None
    if not url or cfg.file:
        return
    file = cached_release(url)
    if not file.is_file():
        tag = f"{variant}.{cfg.tag}" if cfg.tag else variant
        raise ReleasedWeightsUnavailableError(
            f"{tag}: HF_HUB_OFFLINE is set and {file} is not in timm's cache; {release_advice(url, file)} "
            "(pretrained_cfg_overlay=dict(file=...))"
        )


def _file_num_classes(path: str) -> int | None:
    """Rows of the classifier in a local ``.pth`` / ``.safetensors`` file (memory-mapped), ``None`` if none."""
    if str(path).endswith(".safetensors"):
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: f.get_slice(k).get_shape() for k in f.keys() if k.endswith(HEAD_KEYS)}
    else:
        # timm's train.py checkpoints also hold its argparse.Namespace of arguments
        with torch.serialization.safe_globals([argparse.Namespace]):
            try:
                sd = torch.load(str(path), map_location="cpu", mmap=True, weights_only=True)
            except RuntimeError as exc:  # the legacy (non-zip) format cannot be memory-mapped
                if "mmap can only be used" not in str(exc):
                    raise
                sd = torch.load(str(path), map_location="cpu", weights_only=True)
        if not isinstance(sd, dict):
            raise ValueError(f"it holds a {type(sd).__name__}, not a state dict")
        shapes = {k: list(v.shape) for k, v in unwrap_state_dict(sd).items() if k.endswith(HEAD_KEYS)}
    for head in HEAD_KEYS:
        for key, shape in shapes.items():
            if key.removeprefix("module.") == head and len(shape) == 2:
                return int(shape[0])
    return None


def resolve_local_head(pretrained: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keep a trained head when weights come from a local file (``pretrained_cfg_overlay=dict(file=...)``).

    timm drops the classifier weights whenever ``num_classes`` differs from the pretrained config's (1000 for
    every config here), so a 5-class checkpoint loaded with ``num_classes=5`` would silently get a fresh head.
    When the overlay names a file and no ``num_classes``, the file's own classifier size is written into the
    overlay: the head is then kept when it matches the requested ``num_classes`` and re-initialised only when it
    does not (fine-tuning to another label set), as timm does for its hub weights.
    """
    overlay = kwargs.get("pretrained_cfg_overlay")
    if not pretrained or not isinstance(overlay, dict):
        return kwargs
    path = overlay.get("file")
    if not path:
        return kwargs
    file = Path(path)
    what = not_a_regular_file(file)
    if what is not None:  # a FIFO would block timm's loader forever
        raise ValueError(f"checkpoint file {path} is {what}, not a regular file; a weights file is expected")
    if not file.is_file():  # timm's loader raised a FileNotFoundError without a message
        raise FileNotFoundError(f"checkpoint file {path} not found")
    if "num_classes" in overlay:
        return kwargs
    if file.stat().st_size == 0:
        raise ValueError(f"checkpoint file {path} is empty")
    try:
        classes = _file_num_classes(path)
    except pickle.UnpicklingError:  # not weights-only (or not a pickle at all): timm's loader decides and reports
        return kwargs
    except Exception as exc:  # a truncated archive or safetensors header, or no state dict inside
        raise ValueError(f"checkpoint file {path} cannot be read as weights ({type(exc).__name__}: {exc})") from None
    if classes is not None:
        kwargs["pretrained_cfg_overlay"] = {**overlay, "num_classes": classes}
    return kwargs


def default_cfg(**kwargs: Any) -> dict[str, Any]:
    """timm pretrained config shared by the families (ImageNet normalisation, ``stem.conv1``, ``head.fc``)."""
    return {
        "url": "",
        "num_classes": 1000,
        "input_size": (3, 224, 224),
        "pool_size": (7, 7),
        "crop_pct": 0.875,
        "interpolation": "bicubic",
        "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD,
        "first_conv": "stem.conv1",
        "classifier": "head.fc",
        "license": "apache-2.0",
        **kwargs,
    }
