"""Checks on a model's name and constructor arguments, before anything is built: the errors a bad name or argument
raises, the bounds on each argument, and the bound on the parameters they ask for together (shared by the
classifier and backbone factory, the dense builders and the restoration registry)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from pdevision._values import is_finite_number, is_int


class ModelNameError(ValueError):
    """An unknown model name."""


class ModelArgumentError(TypeError, ValueError):
    """An argument the model's constructor does not take: a ``TypeError`` as Python raises it, and a ``ValueError``
    so that the command line reports it as bad input (one line, exit 2)."""


class UnsafeModelArgumentError(ModelArgumentError):
    """A model argument that would make the library fetch or read weights, or build an absurd size."""


_REFUSED_KEYS = re.compile(r"pretrain|checkpoint|path|url|uri|file|hub|cache|download|feature_cfg|_cls$", re.I)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# the largest width or side (channels, pixels) anything may ask for: integer model arguments that are not counts,
# image and patch sizes, decoder widths; beyond it the allocation runs out of memory before anything useful
MAX_SIZE = 16384
MAX_COUNT_ARGUMENT = 1024  # depths, heads, layers, blocks per entry
# 4 GB of float32 weights, 16 GB to train with AdamW: above every registered model at its default size
MAX_PARAMETERS = 1_000_000_000
_COUNT_KEYS = re.compile(r"depth|layers|blocks|heads|repeat", re.I)
# iteration counts (explicit heat-conduction sub-steps): each one is a pass over every feature map of a block, so
# the work a model asks for grows with them where its parameters do not (hcl_steps 16384 had not finished one batch
# of two 64-px images after 240 s); 64 is above every registered configuration (1) and any published one
MAX_STEP_ARGUMENT = 64
_STEP_KEYS = re.compile(r"(^|_)(steps|iters|iterations)$")
_WIDTH_KEYS = re.compile(r"(^|_)(dims?|embed_dims?|widths?|channels|hidden_dims?)$")
_DEPTH_KEYS = re.compile(r"(^|_)depths?$")
_HEAD_KEYS = re.compile(r"(^|_)(num_)?heads$")
# the per-stage lists of a staged backbone: given together, one entry per stage each
_STAGE_LISTS = ("depths", "dims", "embed_dims", "widths")


def _ints(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


# timm's pooling types for a classifier head (an empty one, no pooling, leaves a map the head cannot take)
MAX_CLASSES = 1_000_000  # ImageNet-21k has 21,843; a count past int64 overflowed inside torch
MAX_RATIO_ARGUMENT = 64  # mlp_ratio: a hidden width of 64 times the stage's is far past any model here
POOL_TYPES = ("avg", "max", "avgmax", "catavgmax", "token", "map")  # the last two: timm's ViTs


RATE_EXPECTED = "a number in [0, 1) (a probability)"  # what check_rate accepts, as its messages say it


def valid_image_size(value: Any) -> bool:
    """Whether ``value`` is an image size: an integer, or a (height, width) pair of them, from 1 to :data:`MAX_SIZE`
    (the one check of an image size read from a file or given to :func:`pdevision.models.factory.create_model`)."""
    sides = list(value) if isinstance(value, (list, tuple)) and len(value) == 2 else [value]
    return all(is_int(v) and 0 < v <= MAX_SIZE for v in sides)


def check_rate(value: Any, name: str = "drop_path_rate") -> float:
    """``value`` as a float where it is a drop probability (``drop_path_rate``: stochastic depth drops a block with
    it), a number in [0, 1); else a :class:`ModelArgumentError` naming ``name`` (1 or more, a negative or a NaN rate
    failed at the first training step). The one check of such a rate: each constructor that takes one calls it, and
    argument dicts (model arguments of a file, a checkpoint or ``--model-args``) reach it through the constructor,
    built on the meta device before anything is allocated (:func:`check_model_size`); a timm model's own dropout
    rates are checked by torch there. The command line's ``--drop-path`` calls it where the flag enters (its type,
    :func:`pdevision.engine.validators.drop_rate`)."""
    if not (is_finite_number(value) and 0 <= value < 1):
        raise ModelArgumentError(f"{name}={value!r:.80} given must be {RATE_EXPECTED}")
    return float(value)


def check_model_values(args: Mapping[str, Any], source: str = "given") -> None:
    """A :class:`ModelArgumentError` naming the first argument whose value has the wrong sign, type or length for
    what its name says, before anything is built: ``num_classes`` an integer >= 0, ``in_chans`` >= 1, widths
    (``dims``, ``embed_dim``, ...) and heads positive, depths >= 0, iteration counts (``hcl_steps``, ``steps``)
    from 1 to :data:`MAX_STEP_ARGUMENT`, and per-stage lists given together of one length."""

    def bad(key: str, want: str) -> ModelArgumentError:
        return ModelArgumentError(f"model argument {key}={args[key]!r:.80} {source} must be {want}")

    if "num_classes" in args and not (is_int(args["num_classes"]) and 0 <= args["num_classes"] <= MAX_CLASSES):
        raise bad("num_classes", f"an integer from 0 (no classifier) to {MAX_CLASSES:,}")
    if "in_chans" in args and not (is_int(args["in_chans"]) and args["in_chans"] >= 1):
        raise bad("in_chans", "a positive number of input channels")
    if "global_pool" in args and args["global_pool"] not in POOL_TYPES:
        raise bad("global_pool", f"one of timm's pooling types {POOL_TYPES}")
    for key, value in args.items():  # drop rates: the model's constructor (check_rate), torch's dropout for timm's
        if key == "mlp_ratio" and not (is_finite_number(value) and 0 < value <= MAX_RATIO_ARGUMENT):
            raise bad(key, f"a number above 0 and at most {MAX_RATIO_ARGUMENT} (a width multiplier)")
    for key, value in args.items():
        items = _ints(value)
        if _STEP_KEYS.search(key) and not all(is_int(v) and 1 <= v <= MAX_STEP_ARGUMENT for v in items):
            raise bad(key, f"an integer from 1 to {MAX_STEP_ARGUMENT} (iterations per block)")
        if _WIDTH_KEYS.search(key) and not (items and all(is_int(v) and v >= 1 for v in items)):
            raise bad(key, "a positive channel count (or a non-empty list of them)")
        if _DEPTH_KEYS.search(key) and not (items and all(is_int(v) and v >= 0 for v in items)):
            raise bad(key, "a block count >= 0 (or a non-empty list of them)")
        if _HEAD_KEYS.search(key) and not (items and all(is_int(v) and v >= 1 for v in items)):
            raise bad(key, "a positive number of heads (or a non-empty list of them)")
    lists = {k: len(args[k]) for k in _STAGE_LISTS if isinstance(args.get(k), (list, tuple))}
    if len(set(lists.values())) > 1:
        shown = " and ".join(f"{k} has {n}" for k, n in lists.items())
        raise ModelArgumentError(f"model arguments {source} need one entry per stage in each list, but {shown}")


def _check_value(key: str, value: Any, source: str, depth: int = 0) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        limit = MAX_COUNT_ARGUMENT if _COUNT_KEYS.search(key) else MAX_SIZE
        if abs(value) > limit:
            raise UnsafeModelArgumentError(f"model argument {key}={value} {source} is above {limit}; refused")
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnsafeModelArgumentError(f"model argument {key}={value} {source} is not finite; refused")
        return
    if isinstance(value, str):
        if len(value) > 64 or re.search(r"://|[/\\:~]|^hf[-_]hub|\.\.", value):
            raise UnsafeModelArgumentError(
                f"model argument {key}={value!r} {source} looks like a URL or file reference; refused"
            )
        return
    if isinstance(value, (list, tuple)) and depth < 2 and len(value) <= 64:
        for item in value:
            _check_value(key, item, source, depth + 1)
        return
    raise UnsafeModelArgumentError(f"model argument {key} {source} has a value of type {type(value).__name__}; refused")


def check_model_args(args: Any, source: str = "given") -> dict[str, Any]:
    """``args`` after refusing anything but plain constructor arguments: no name that makes timm fetch or read
    weights (``pretrained``, ``pretrained_cfg*``, ``checkpoint_path``, ...), no string that looks like a URL or a
    path, integers bounded (depths, heads, layers at most :data:`MAX_COUNT_ARGUMENT` each, other integers at most
    :data:`MAX_SIZE`). ``source`` says where they came from in the message (``"in the checkpoint"``)."""
    if not isinstance(args, dict):
        raise UnsafeModelArgumentError(f"model arguments {source} must be a JSON object, not {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UnsafeModelArgumentError(f"model argument name {key!r} {source} is not an identifier; refused")
        if _REFUSED_KEYS.search(key.replace("drop_path", "")) and not (key == "pretrained" and value is False):
            raise UnsafeModelArgumentError(
                f"model argument {key!r} {source} could make the library download or read other weights; refused "
                "(model arguments may only be constructor arguments such as depths or widths; load local weights "
                "with timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...)))"
            )
        _check_value(key, value, source)
    check_model_values(args, source)
    return args


def check_model_size(build: Callable[[], nn.Module], name: str, args: Mapping[str, Any]) -> None:
    """Refuse the model ``build()`` makes from ``name`` and ``args`` when it has more than :data:`MAX_PARAMETERS`
    parameters, before any memory is taken: ``build()`` runs on the meta device (shapes only) and its parameters are
    counted. Bounding each argument is not enough: widths multiply (``dims`` 16384 gives a model of 480 billion
    parameters) and vHeat's frequency embeddings grow with the square of the input size. A model that does not build
    on the meta device is left to its real build, which reports whatever is wrong with its arguments; a constructor's
    ``ValueError`` (its check of an argument: ``mixer must be one of ...``) is a :class:`ModelArgumentError` here."""
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    try:
        with torch.device("meta"):
            model = build()
    except ModelArgumentError:
        raise
    except ValueError as exc:  # the arguments the user gave are refused by the model itself
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ModelArgumentError(f"{name} cannot be built with {shown:.160}: {text}") from exc
    except Exception:  # the real build raises the error the user should see
        return
    count = sum(p.numel() for p in model.parameters())
    if count > MAX_PARAMETERS:
        raise UnsafeModelArgumentError(
            f"{name} with {shown:.120} would have {count / 1e9:,.1f} billion parameters, above the limit of "
            f"{MAX_PARAMETERS / 1e9:.0f} billion; refused (check its widths, depths and image size)"
        )


def check_model_name(name: Any, source: str = "given") -> str:
    """``name`` if it is a plain registered-model name (no ``hf-hub:`` / ``local-dir:`` reference, no path)."""
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        raise ModelNameError(
            f"model name {name!r:.80} {source} is not a registered model name (no hub or file references)"
        )
    return name
