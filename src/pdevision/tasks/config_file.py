"""``pdevision train --config FILE``: flag values from a YAML or JSON mapping (timm's ``train.py -c args.yaml``).

The keys are the flags' names as the run records them (``batch_size`` for ``--batch-size``, ``verify_images: false``
for ``--no-verify-images``), so a run's own ``config.json`` passed back repeats the run. Each value goes through the
flag's own checks; a flag given on the command line wins over the file. Keys a run records but no flag sets
(:data:`RECORDED_ONLY`, and the run's or the task's settings without a flag) are accepted and left to the run,
which derives them from the flags again (a setting with a fixed default, such as ``sched``, only at that default);
any other key, a value of the wrong type, a file that is missing or not a mapping is a
:class:`~pdevision.tasks.args.UsageError` (one line).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pdevision._files import not_a_regular_file
from pdevision.engine.config import RunConfig
from pdevision.engine.hub import run_settings
from pdevision.engine.metadata import MAX_JSON_DEPTH, MetadataError, RepeatedKeyError, parse_json, unique_pairs
from pdevision.errors import UsageError

log = logging.getLogger(__name__)

# keys of a run's config.json that no flag sets: the task's name (its flag is --task) and values derived from flags
RECORDED_ONLY = frozenset({"task", "recipe_name", "recipe_values", "resumed"})
# keys that timm's train.py writes into its args.yaml and no pdevision command has: three of them name such a file
TIMM_TRAIN_KEYS = frozenset(
    {
        "data_dir",
        "train_split",
        "initial_checkpoint",
        "no_resume_opt",
        "validation_batch_size",
        "opt_eps",
        "opt_betas",
        "clip_mode",
        "layer_decay",
        "sched_on_updates",
        "warmup_lr",
        "cooldown_epochs",
        "patience_epochs",
        "decay_rate",
        "train_interpolation",
        "remode",
        "recount",
        "resplit",
        "mixup_mode",
        "model_ema_decay",
        "log_interval",
        "recovery_interval",
        "checkpoint_hist",
        "eval_metric",
        "local_rank",
        "use_multi_epochs_loader",
        "log_wandb",
        "experiment",
    }
)
MAX_BYTES = 1 << 20  # a flag file is a few kilobytes; a larger one is not one
MAX_DEPTH = MAX_JSON_DEPTH  # a flag's value is a list or a mapping of model arguments: two or three levels
MAX_VALUES = 100_000
_SHAPE = (
    f"a file of flag values holds at most {MAX_VALUES:,} values nested at most {MAX_DEPTH} deep, and at most "
    f"{MAX_BYTES:,} characters of text once its aliases are expanded"
)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in ``path`` (``.yaml`` / ``.yml`` through PyYAML's safe loader, else JSON)."""
    file = Path(path)
    what = not_a_regular_file(file)
    if what is not None:  # a FIFO would wait for a writer forever
        raise UsageError(f"--config {path} is {what}, not a file (expected a YAML or JSON file of flag values)")
    if not file.is_file():
        raise UsageError(f"--config {path}: no such file (expected a YAML or JSON file of flag values)")
    if file.stat().st_size > MAX_BYTES:
        raise UsageError(f"--config {path}: {file.stat().st_size} bytes, more than a file of flag values holds")
    text = file.read_text(encoding="utf-8", errors="replace")
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            value = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python objects
        except RepeatedKeyError as exc:
            raise UsageError(f"--config {path}: {exc} (a file of flag values sets each key once)") from None
        except yaml.YAMLError as exc:
            raise UsageError(f"--config {path}: not YAML: {' '.join(str(exc).split())}") from None
        except RecursionError:  # PyYAML builds nested values recursively
            raise UsageError(f"--config {path}: nested deeper than Python can read; {_SHAPE}") from None
    else:
        try:
            value = parse_json(text)
        except MetadataError as exc:
            raise UsageError(f"--config {path}: {exc}; YAML files end in .yaml or .yml") from None
        try:  # the limits are checked: read once more, each mapping's keys seen in turn
            json.loads(text, object_pairs_hook=unique_pairs)
        except RepeatedKeyError as exc:
            raise UsageError(f"--config {path}: {exc} (a file of flag values sets each key once)") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise UsageError(f"--config {path}: holds a {type(value).__name__}, expected a mapping of flag names to values")
    if not all(isinstance(k, str) for k in value):
        raise UsageError(f"--config {path}: every key must be a flag name, got {sorted(map(repr, value))[:3]}")
    _check_shape(value, path)
    if "task" in value and not isinstance(value["task"], str):
        raise UsageError(f"--config {path}: task must be a task name, got {value['task']!r:.80}")
    return run_settings(value)  # a run's config.json: its settings, without timm's keys beside them


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (YAML 1.2 forbids it; PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged keys may be set again
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the safe loader says so
                break
            if repeated:
                raise RepeatedKeyError(key)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_shape(value: Any, path: str | Path) -> None:
    """Refuse values nested deeper than :data:`MAX_DEPTH`, of more than :data:`MAX_VALUES` values or of more than
    :data:`MAX_BYTES` characters of strings once YAML's aliases are expanded (a "billion laughs" file of a few
    hundred bytes names 10^9 values; one string of 100 kB aliased 5,000 times in ``model_args`` is 500 MB of text,
    refused after 13 s before this bound), walked without recursion and stopped at the limit."""
    stack, count, chars = [(value, 1)], 0, 0
    while stack:
        item, depth = stack.pop()
        count += 1
        chars += len(item) if isinstance(item, str) else 0  # one long string aliased many times: a quadratic bomb
        if depth > MAX_DEPTH or count > MAX_VALUES or chars > MAX_BYTES:
            raise UsageError(f"--config {path}: {_SHAPE}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's optional flags by destination (``batch_size`` -> ``--batch-size``)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}


def _convert(action: argparse.Action, key: str, value: Any, source: str) -> Any:
    flag = action.option_strings[-1]

    def wrong(why: str) -> UsageError:
        return UsageError(f"{source}: {key} ({flag}): {why}")

    if isinstance(action, argparse._StoreConstAction | argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise wrong(f"must be true or false, got {value!r}")
        return value
    if value is None:
        if action.default is not None or action.required:
            raise wrong(f"must have a value, got null (default {action.default!r})")
        return None
    many = action.nargs in ("*", "+") or isinstance(action.nargs, int)
    if many:
        if not isinstance(value, list):
            raise wrong(f"must be a list, got {value!r}")
        return [_one(action, v, wrong) for v in value]
    if isinstance(value, list):
        raise wrong(f"takes one value, got a list {value!r}")
    return _one(action, value, wrong)


def _one(action: argparse.Action, value: Any, wrong: Any) -> Any:
    if isinstance(value, bool):  # JSON true is not a number or a name here
        raise wrong(f"must be a value of the flag, got {str(value).lower()}")
    if isinstance(value, dict):
        text = json.dumps(value)
    elif isinstance(value, int | float | str):
        text = str(value)
    else:
        raise wrong(f"unsupported value {value!r}")
    try:
        converted = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        raise wrong(str(exc) or f"invalid value {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        raise wrong(f"must be one of {', '.join(map(str, action.choices))}, got {converted!r}")
    return converted


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists), for comparing a file's value with a default."""
    return json.loads(json.dumps(value, default=str))


def config_defaults(
    parser: argparse.ArgumentParser,
    values: Mapping[str, Any],
    source: str,
    task_defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The parser's defaults that ``values`` (a config file's mapping) sets, each checked like its flag; ``source``
    names where they come from in the messages (``--config FILE``).
    ``task_defaults``: the task configuration's settings as a run with no flags has them (its fields without a flag
    are accepted at these values only)."""
    actions = _actions(parser)
    run_fields = {f.name for f in dataclasses.fields(RunConfig)} - set(actions)
    # run settings without a flag: those with a fixed default must hold it (the run would not take another value);
    # those a recipe fills (default None: lr_base, lr_base_batch, ...) are the run's own derivation, taken as recorded
    fields = [f for f in dataclasses.fields(RunConfig) if f.name in run_fields]
    fixed_defaults = {f.name: f.default for f in fields if f.default not in (None, dataclasses.MISSING)}
    task_fixed = {k: v for k, v in (task_defaults or {}).items() if k not in actions and k not in run_fields}
    fixed_defaults.update(task_fixed)
    run_fields |= set(task_fixed)
    unknown = [key for key in values if key not in actions and key not in RECORDED_ONLY and key not in run_fields]
    if len(TIMM_TRAIN_KEYS.intersection(unknown)) >= 3:  # timm's train.py wrote it: name all it holds at once
        raise UsageError(
            f"{source} is a timm train.py args file, not pdevision's flags; pdevision does not know its keys "
            f"{', '.join(unknown)} (give those settings as pdevision flags: see --help)"
        )
    out: dict[str, Any] = {}
    recorded: list[str] = []
    for key, value in values.items():
        if key in actions:
            out[key] = _convert(actions[key], key, value, source)
        elif key in RECORDED_ONLY or key in run_fields:
            fixed = fixed_defaults.get(key, value)
            if _plain(value) != _plain(fixed):
                raise UsageError(f"{source}: {key} has no flag; only its default {fixed!r} is accepted, got {value!r}")
            recorded.append(key)
        else:
            raise UsageError(
                f"{source}: unknown key {key!r} (expected flag names of this command, as the run records "
                f"them: e.g. {', '.join(sorted(actions)[:6])}; see --help)"
            )
    if recorded:
        names = ", ".join(recorded)
        log.info("%s: %s recorded by a run, set by no flag (the run derives them)", source, names)
    return out


__all__ = ["RECORDED_ONLY", "TIMM_TRAIN_KEYS", "RepeatedKeyError", "config_defaults", "load_config_file"]
