"""The one way from a checkpoint to a model, with its safety rules, for every task and command.

A checkpoint's metadata is untrusted input, whatever its format (:mod:`pdevision.engine.checkpoint`: pdevision's run and
checkpoint folders, timm / Hugging Face folders, timm ``.pth.tar`` files, the authors' ``.pth``).
:func:`load_checkpoint_model` (what ``eval``, ``predict``, ``restore``, ``viz``, ``--init-from`` and the tasks use)
reads it, checks the checkpoint is of a kind the caller takes (naming the
task it belongs to otherwise), checks the model name and arguments (:func:`pdevision.models.factory.check_model_args`:
nothing that makes timm fetch or read weights, no URL- or path-like strings, bounded integers; the same rules as
``--model-args`` and the Python factory), bounds the image size, has the task build the model (never with pretrained
weights), and loads the weights strictly, refusing non-finite ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from pdevision.engine import released
from pdevision.engine.checkpoint import (
    CheckpointError,
    check_finite_weights,
    checkpoint_filter_of,
    checkpoint_kind,
    label_names,
    load_weights,
    read_meta,
    resolve,
    valid_image_size,
)
from pdevision.fastpath import on_device
from pdevision.models.factory import (
    MAX_SIZE,
    ModelArgumentError,
    ModelNameError,
    check_image_size,
    check_model_args,
    check_model_name,
    create_model,
    min_input_size,
)

__all__ = [
    "ModelNameError",
    "check_finite_weights",
    "check_image_size",
    "checked_model_args",
    "classifier_from_meta",
    "create_model",
    "load_checkpoint_model",
    "load_classifier",
    "load_into_model",
    "load_released",
    "min_input_size",
    "model_from_meta",
    "released_tag",
]


def load_into_model(
    model: nn.Module,
    checkpoint: str | Path,
    model_name: str,
    classes: list[str] | None,
    reset_head: bool = False,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` after checking it was trained for the same model
    and classes; ``reset_head`` keeps the model's own (new) classifier instead. ``meta``: the checkpoint's metadata
    where it was read already (``read_meta(checkpoint, model=model_name)``); ``None``: read here."""
    if meta is None:
        meta = read_meta(checkpoint, model=model_name)
    if meta.get("model") and meta["model"] != model_name:
        raise CheckpointError(
            f"checkpoint {checkpoint} holds a {meta['model']!r} model, not {model_name!r} (use --model {meta['model']})"
        )
    state = load_weights(checkpoint, model)
    check_finite_weights(state, checkpoint)
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    head_keys = {f"{n}" for n, m in model.named_modules() if m is head}
    if reset_head:
        prefixes = tuple(f"{k}." for k in head_keys)
        state = {k: v for k, v in state.items() if not k.startswith(prefixes)}
    elif classes is not None and meta.get("classes") is not None and list(meta["classes"]) != list(classes):
        raise CheckpointError(
            f"checkpoint {checkpoint} was trained for {len(meta['classes'])} classes {meta['classes'][:10]}, "
            f"the data has {len(classes)} {classes[:10]}; pass --reset-head to fine-tune with a new classifier"
        )
    own = model.state_dict()
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    if mismatched:
        raise CheckpointError(f"checkpoint {checkpoint} does not fit {model_name}: shapes differ for {mismatched[:5]}")
    if meta["format"] == "pdevision" and any(k.endswith("k_exp") for k in state) and hasattr(model, "reparameterize"):
        model.reparameterize()  # a foreign file's filter has folded the model already
    missing, unexpected = model.load_state_dict(state, strict=False)
    if reset_head:
        missing = [k for k in missing if not k.startswith(tuple(f"{h}." for h in head_keys))]
    if missing or unexpected:  # counted, with the first few: a whole list can run to thousands of names
        raise CheckpointError(
            f"checkpoint {checkpoint} does not fit {model_name}: {len(missing)} weights missing {missing[:5]}, "
            f"{len(unexpected)} unexpected {unexpected[:5]}"
        )
    return meta


def released_tag(name: str) -> str:
    """The pretrained tag of ``name`` with released weights (``vheat_tiny`` -> ``vheat_tiny.in1k``); a
    :class:`CheckpointError` naming the models that have some when it has none."""
    try:
        cfg = timm.models.get_pretrained_cfg(name, allow_unregistered=False)
    except RuntimeError:
        cfg = None
    if cfg is None or not (cfg.url or cfg.hf_hub_id):
        ours = ", ".join(timm.list_pretrained("vheat*") + timm.list_pretrained("waveformer*"))
        raise CheckpointError(
            f"{name} has no released weights for --pretrained (this library's models with released weights: {ours}; "
            "timm's own models: timm.list_pretrained())"
        )
    return f"{cfg.architecture}.{cfg.tag}" if cfg.tag else str(cfg.architecture)


def load_released(model: nn.Module, name: str) -> str:
    """Load the released weights of ``name`` (:func:`released_tag`) into ``model`` with timm's
    ``load_pretrained`` and the family's filter; the classifier only when its size matches (else the model's own,
    fresh head is kept, as timm does). The one place a command downloads (into timm's cache, once), and only when the
    user asks for released weights (``--pretrained``). Returns the tag loaded."""
    tag = released_tag(name)
    cfg = timm.models.get_pretrained_cfg(tag).to_dict()
    if cfg.get("url"):  # read (or downloaded) here, so that no network or a bad cached file is one line
        cfg["state_dict"] = released.released_state(tag, cfg["url"])
    timm.models.load_pretrained(
        model,
        pretrained_cfg=cfg,
        num_classes=int(getattr(model, "num_classes", cfg.get("num_classes", 0))),
        in_chans=int(cfg.get("input_size", (3,))[0]),
        filter_fn=checkpoint_filter_of(model),
    )
    return tag


def checked_model_args(meta: dict[str, Any]) -> dict[str, Any]:
    """The model arguments of checkpoint metadata, refused with a :class:`CheckpointError` unless they are plain
    constructor arguments (see the module docstring); ``img_size`` (of the arguments and of the metadata) checked to
    be an integer (pair) up to :data:`~pdevision.models.factory.MAX_SIZE`."""
    try:
        check_model_name(meta.get("model"), "in the checkpoint")
        args = dict(check_model_args(meta.get("model_args", {}), "in the checkpoint"))
    except (ModelArgumentError, ModelNameError) as exc:
        raise CheckpointError(str(exc)) from exc
    # the metadata's own image size too: the evaluation transforms read it (an OverflowError at 10**12)
    # (None in the arguments: the model's default size; the metadata's own size has no default to fall back on)
    sizes = [args["img_size"]] if args.get("img_size") is not None else []
    for value in sizes + ([meta["img_size"]] if "img_size" in meta else []):
        if not valid_image_size(value):
            raise CheckpointError(f"image size {value!r:.80} in the checkpoint is not an integer from 1 to {MAX_SIZE}")
    return args


def load_checkpoint_model(
    path: str | Path,
    kinds: Sequence[str],
    build: Callable[[dict[str, Any], dict[str, Any]], nn.Module],
    load: bool = True,
    meta: dict[str, Any] | None = None,
) -> tuple[nn.Module, dict[str, Any], Path]:
    """The model of the checkpoint at ``path`` (a checkpoint or run folder), its metadata and its folder.

    ``kinds``: the checkpoint kinds (task names) the caller takes; another kind is a :class:`CheckpointError`
    naming the task it belongs to. ``build(meta, args)`` makes the model from the metadata and the checked model
    arguments (``drop_path_rate`` removed: training only). With ``load``, the weights are loaded strictly and must be
    finite; the model is returned in eval mode on the CPU. ``meta``: the checkpoint's metadata where the caller has
    read it already (``read_meta(path)``: the command line reads a ``--checkpoint``'s once, to choose the
    task); ``None``: read here. Either way it is checked here like any checkpoint's."""
    folder = resolve(path)
    if meta is None:
        meta = read_meta(folder)
    kind = checkpoint_kind(meta)
    if kind not in kinds:
        raise CheckpointError(
            f"{folder} is a {kind or 'unknown'} checkpoint"
            + (f" (of the {kind} task)" if kind else " (its metadata names no task)")
            + f"; this takes {' or '.join(kinds)} checkpoints"
        )
    args = checked_model_args(meta)
    args.pop("drop_path_rate", None)
    try:
        model = build(meta, args)
    except (TypeError, KeyError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(
            f"checkpoint {folder}: its metadata does not describe a model that can be built ({text})"
        ) from exc
    if load:
        state = load_weights(folder, model)
        check_finite_weights(state, folder)
        own = model.state_dict()
        mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
        if mismatched:  # load_state_dict would raise a RuntimeError listing every one
            first = mismatched[0]
            raise CheckpointError(
                f"checkpoint {folder} does not fit {meta.get('model')} as its metadata describes it: shapes differ "
                f"for {len(mismatched)} weights {mismatched[:5]} (first: {tuple(state[first].shape)} in the file, "
                f"{tuple(own[first].shape)} in the model)"
            )
        if (
            meta["format"] == "pdevision"
            and any(k.endswith("k_exp") for k in state)
            and hasattr(model, "reparameterize")
        ):
            model.reparameterize()  # a foreign file's filter has folded the model already
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:  # counted, with the first few: a whole list can run to thousands of names
            raise CheckpointError(
                f"checkpoint {folder} does not fit {meta.get('model')}: {len(missing)} weights missing {missing[:5]}, "
                f"{len(unexpected)} unexpected {unexpected[:5]}"
            )
    return model.eval(), meta, folder


def _unknown_constructor_args(model: nn.Module, names: list[str]) -> list[str]:
    params = inspect.signature(type(model).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []  # the class passes extra arguments on: timm's builder has checked them already
    return [n for n in names if n not in params]


def model_from_meta(meta: dict[str, Any], num_classes: int, name: str | None = None) -> nn.Module:
    """The backbone a checkpoint's metadata describes (name, arguments, image size), with ``num_classes`` outputs
    (0 for a bare encoder); training-only arguments such as drop path are left out. Arguments are checked by
    :func:`checked_model_args`; the model is never built with pretrained weights."""
    name = name or meta.get("model")
    if not name:
        raise CheckpointError("the checkpoint does not name its model; pass --model")
    args = checked_model_args({**meta, "model": name})
    img_size = args.pop("img_size", meta.get("img_size"))
    args.pop("drop_path_rate", None)
    try:
        model = create_model(name, num_classes=num_classes, img_size=img_size, **args)
    except (TypeError, ModelNameError) as exc:  # an argument the model's constructor does not take
        raise CheckpointError(
            f"model arguments {sorted(args)} in the checkpoint do not fit {name} ({' '.join(str(exc).split())}); "
            "refused"
        ) from exc
    unknown = _unknown_constructor_args(model, list(args))
    if unknown:
        raise CheckpointError(f"model arguments {unknown} in the checkpoint are not arguments of {name}; refused")
    return model


def classifier_from_meta(meta: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    """The classifier a classification checkpoint's metadata describes (its classes as outputs; weights not loaded):
    the builder of :func:`load_checkpoint_model` for classification checkpoints."""
    classes = meta.get("classes") or label_names(meta)  # a foreign file may give only the count
    if not classes:
        raise CheckpointError("the checkpoint does not list its classes; it needs a classifier")
    return model_from_meta(meta, len(classes))


def load_classifier(
    checkpoint: str | Path,
    device: torch.device | str = "cpu",
    fused_kernels: bool = False,
    meta: dict[str, Any] | None = None,
) -> tuple[nn.Module, dict[str, Any], Path]:
    """The eval-mode classifier of a classification checkpoint or run folder, its metadata and its folder:
    :func:`load_checkpoint_model` for the ``classify`` kind (``meta``: its metadata if read already), the model moved
    to ``device``; with ``fused_kernels`` on the CPU kernels there (:func:`pdevision.fastpath.on_device`: what
    ``eval`` and ``predict`` run), else the plain modules (what the figures hook into)."""
    model, meta, folder = load_checkpoint_model(checkpoint, ("classify",), classifier_from_meta, meta=meta)
    return (on_device(model, device) if fused_kernels else model.to(device)), meta, folder
