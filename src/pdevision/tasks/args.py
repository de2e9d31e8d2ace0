"""Command-line arguments the tasks declare: the run settings every task shares, made from the fields of
:class:`~pdevision.engine.config.RunConfig` (:func:`add_run_arguments` -> :func:`run_config`); the value types are
:mod:`pdevision.engine.validators`. The ``pdevision`` command (:mod:`pdevision.cli`) builds its
parsers from these and from each task's own declaration (:mod:`pdevision.tasks.registry`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pdevision.engine.config import Flag, RunConfig, flag_fields, flag_name
from pdevision.errors import UsageError


def write_new_file(path: str | Path, text: str) -> None:
    """Write ``text`` into a file that must not exist yet, whole: written under a temporary name beside it, then
    linked to its name in one step (a reader never sees half of it; a file made there meanwhile is not replaced).
    Where the file system has no hard links, the file is created exclusively and written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links here
            with open(path, "x", encoding="utf-8") as f:
                f.write(text)
    except FileExistsError:
        raise UsageError(f"{path} exists (it is not overwritten; name a new file)") from None
    finally:
        tmp.unlink(missing_ok=True)


def add_run_arguments(
    p: argparse.ArgumentParser,
    output: str,
    skip: Iterable[str] = (),
    defaults: dict[str, Any] | None = None,
    config: type[RunConfig] = RunConfig,
) -> None:
    """The run settings as flags, one for each field of ``config`` that declares a :class:`Flag` (in field order,
    in its flag's group), but those in ``skip``; ``None`` defaults mean "the task's". ``output``: the task's default
    run folder; ``defaults``: help text for the task's defaults (flag -> value)."""
    add_config_arguments(p, config, skip, defaults, {"{task_output}": output})
    p.set_defaults(default_output=output)


def add_config_arguments(
    p: argparse.ArgumentParser,
    config: type,
    skip: Iterable[str] = (),
    defaults: dict[str, Any] | None = None,
    fill: dict[str, str] | None = None,
    flags: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """A flag for each field of the dataclass ``config`` that declares a :class:`Flag` (a task's configuration, or
    :class:`RunConfig`), in field order, in its flag's group; each stores into the field's name, so
    :func:`task_fields` reads them back. ``fill``: text put in place of each key in the group titles and the help;
    ``flags``: what a task changes of a field's :class:`Flag` (field name -> ``Flag`` keywords, e.g. the choices of
    ``--head``, where the tasks that share a configuration differ)."""
    skip, shown, fill = set(skip), dict(defaults or {}), dict(fill or {})
    groups: dict[str, Any] = {"": p}
    for f in flag_fields(config):
        flag: Flag = dataclasses.replace(f.metadata["flag"], **(flags or {}).get(f.name, {}))
        title = _filled(flag.group, fill)
        if flag.one_of is not None:  # exactly one of the set: argparse's required exclusive group
            title = "one of: " + flag.one_of
            if title not in groups:
                groups[title] = p.add_mutually_exclusive_group(required=True)
        group = groups.get(title) or groups.setdefault(title, p.add_argument_group(title))
        name = flag_name(f)
        if name not in skip:
            group.add_argument(*flag.aliases, name, **_flag_options(f, flag, fill, shown.get(name)))
        if flag.off is not None and flag.off[0] not in skip:
            group.add_argument(flag.off[0], action="store_true", help=flag.off[2])


def _filled(text: str, fill: dict[str, str]) -> str:
    """``text`` with each key of ``fill`` replaced by its value."""
    for key, value in fill.items():
        text = text.replace(key, value)
    return text


def _flag_options(f: Any, flag: Flag, fill: dict[str, str], shown: Any) -> dict[str, Any]:
    """``add_argument``'s keywords for the field ``f``: a switch for a ``bool``, else a value of the field's type
    (several with ``nargs``: a list, as argparse gives them)."""
    text = None if flag.help is None else _filled(flag.help, fill)
    if shown is not None:
        text = f"{text or ''} (default {shown})".strip()
    positional = not flag_name(f).startswith("-")
    kw: dict[str, Any] = {"help": text} if positional else {"dest": f.name, "help": text}
    if isinstance(f.default, bool):
        kw["action"] = "store_false" if f.default else "store_true"
        return kw
    kw["default"] = f.default_factory() if f.default is dataclasses.MISSING else f.default
    if flag.nargs is not None:
        kw["nargs"] = flag.nargs
        kw["default"] = None if kw["default"] is None else list(kw["default"])
    for key in ("const", "metavar"):
        if getattr(flag, key) is not None:
            kw[key] = getattr(flag, key)
    if flag.required and not positional:
        kw["required"] = True
        del kw["default"]
    if positional and flag.nargs not in ("?", "*"):
        del kw["default"]  # a required positional argument
    if f.metadata["type"] is not None:
        kw["type"] = f.metadata["type"]
    if flag.choices is not None:
        kw["choices"] = list(flag.choices)
    return kw


def run_config(args: argparse.Namespace, config: type[RunConfig] = RunConfig) -> RunConfig:
    """The ``config`` (:class:`RunConfig`) of parsed run flags (those a task skipped keep their defaults)."""
    values = {}
    for f in flag_fields(config):
        if hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
        off = f.metadata["flag"].off
        if off is not None and getattr(args, off[0].lstrip("-").replace("-", "_"), False):
            values[f.name] = off[1]
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
    return config(**values)


def task_fields(args: argparse.Namespace, cls: type, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The parsed flags named like fields of the dataclass ``cls`` (its ``run`` and ``skip`` left out)."""
    names = set(cls.__dataclass_fields__) - {"run", *skip}
    return {k: v for k, v in vars(args).items() if k in names}


def is_rank0() -> bool:
    """Whether this process prints the summary (rank 0 under ``torchrun``, or a single process)."""
    return os.environ.get("RANK", "0") == "0"
