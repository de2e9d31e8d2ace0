"""The task registry: what the ``pdevision`` command knows of each task, in one place per task.

A task registers a :class:`TaskCommands`: its name (``pdevision train --task NAME``, and the ``kind`` of its
checkpoints), the flags it takes on top of the shared run flags (:func:`pdevision.tasks.args.add_run_arguments`),
how to turn parsed flags into its configuration and run it, and, where it has them, its ``eval`` and ``predict``
(chosen by a checkpoint's ``kind``) and extra commands (``restore``). The command line is built from the registry:
adding a task is a module with a ``Task``, a ``TaskCommands`` and a call of :func:`register` (or an entry point in
the ``pdevision.tasks`` group), with no edit of :mod:`pdevision.cli`.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar

from pdevision.engine.config import RunConfig
from pdevision.engine.runtime import one_line
from pdevision.errors import UsageError
from pdevision.tasks.args import add_run_arguments

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtraCommand:
    """A command of its own that a task adds (``pdevision restore``): its help, arguments and function."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], tuple[str, int]]


class TaskCommands:
    """What the command line needs of a task. Override ``add_arguments``, ``config`` and ``run``; ``evaluate`` and
    ``predict`` where the task has them."""

    name: str = ""
    help: str = ""
    default_output: str = "runs/train"
    kinds: tuple[str, ...] = ()  # checkpoint kinds that eval/predict route here (default: the task's name)
    skip_run_flags: tuple[str, ...] = ()  # shared run flags the task does not take (refused, not ignored)
    run_flag_defaults: ClassVar[dict[str, Any]] = {}  # for --help: the task's own defaults of run flags
    # optional packages (module, extra) that train and eval need, checked before they start (predict: on use)
    requires: tuple[tuple[str, str], ...] = ()

    def checkpoint_kinds(self) -> tuple[str, ...]:
        return self.kinds or (self.name,)

    # train
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The task's own flags of ``pdevision train --task NAME``."""

    def config(self, args: argparse.Namespace, run: RunConfig) -> Any:
        """The task's configuration from parsed flags (``run``: the shared run settings)."""
        raise NotImplementedError

    def run(self, config: Any) -> dict[str, Any]:
        """Train as ``config`` says; the run summary."""
        raise NotImplementedError

    def report(self, summary: dict[str, Any], config: Any) -> str:
        """The line printed after training."""
        return f"{self.name}: {summary['status']}, {summary['epochs_run']} epochs; run folder {config.run.output}"

    # eval / predict of the task's checkpoints (None: the task has none)
    add_eval_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    add_predict_arguments: Callable[[argparse.ArgumentParser], None] | None = None

    def evaluate(self, args: argparse.Namespace) -> str:
        """``pdevision eval``: ``args.checkpoint``, whose metadata the command line has read already
        (:func:`checkpoint_meta`), and the task's eval flags; the text printed."""
        raise UsageError(f"{self.name} checkpoints have no evaluation")

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        """``pdevision predict``: as :meth:`evaluate`, on ``args.images``; the text printed and the exit code."""
        raise UsageError(f"{self.name} checkpoints have no prediction")

    def extra_commands(self) -> dict[str, ExtraCommand]:
        return {}


def checkpoint_meta(args: argparse.Namespace) -> dict[str, Any] | None:
    """The metadata of ``args.checkpoint`` as ``pdevision eval`` and ``predict`` read it, once, before parsing (to
    choose the task); ``None`` where it was not read (the loader reads it then:
    :func:`~pdevision.engine.modeling.load_checkpoint_model`)."""
    return getattr(args, "checkpoint_meta", None)


_TASKS: dict[str, TaskCommands] = {}
_loaded_entry_points = False


def register(commands: TaskCommands) -> TaskCommands:
    """Add a task to the registry (its name must be new); returns it."""
    if not commands.name or not commands.name.isidentifier():
        raise ValueError(f"a task's name must be an identifier, got {commands.name!r}")
    if commands.name in _TASKS and type(_TASKS[commands.name]) is not type(commands):
        raise ValueError(f"a task named {commands.name!r} is registered already")
    _TASKS[commands.name] = commands
    return commands


def unregister(name: str) -> None:
    _TASKS.pop(name, None)


def _load_entry_points() -> None:
    """Tasks of other packages: entry points ``pdevision.tasks`` (``name = module:TaskCommandsClass``)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for ep in entry_points(group="pdevision.tasks"):
        try:
            commands = ep.load()()
        except Exception as exc:  # a broken plugin must not break the command
            log.warning("task entry point %s could not be loaded: %s", ep.name, one_line(exc))
            continue
        try:  # its flags, on parsers like the command line's: a clash or a fault there broke every command
            check_task_parsers(commands)
            register(commands)
        except Exception as exc:
            log.warning("task entry point %s (%s) was not loaded: %s", ep.name, ep.value, one_line(exc))


def check_task_parsers(commands: TaskCommands) -> None:
    """Build every parser the command line builds for ``commands`` (train, eval, predict and its extra commands,
    each beside the flags the command line adds there); what a task's ``add_*arguments`` raises (argparse's
    "conflicting option string" for a flag that is a run flag, any fault of its own) is raised here, at load time,
    where the registry names the plug-in, instead of while the command's parser is built."""
    train = argparse.ArgumentParser(add_help=False)
    add_run_arguments(train, commands.default_output, skip=commands.skip_run_flags, defaults=commands.run_flag_defaults)
    train.add_argument("--task")
    where = "its add_arguments"
    try:
        commands.add_arguments(train)
        for which, add in (("eval", commands.add_eval_arguments), ("predict", commands.add_predict_arguments)):
            if add is None:
                continue
            where = f"its add_{which}_arguments"
            parser = argparse.ArgumentParser(add_help=False)
            for flag in ("--checkpoint", "--device") + (("--output",) if which == "eval" else ()):
                parser.add_argument(flag)
            add(parser)
        where = "its extra_commands"
        for name, extra in commands.extra_commands().items():
            where = f"the add_arguments of its command {name!r}"
            extra.add_arguments(argparse.ArgumentParser(add_help=False))
    except Exception as exc:
        raise RuntimeError(f"{where} failed: {type(exc).__name__}: {one_line(exc)}") from exc


BUILTIN_ORDER = ("classify", "segment", "detect", "denoise", "dejpeg", "pretrain")


def tasks() -> dict[str, TaskCommands]:
    """Every registered task by name (the library's, then plug-ins)."""
    _load_entry_points()
    order = [n for n in BUILTIN_ORDER if n in _TASKS] + [n for n in _TASKS if n not in BUILTIN_ORDER]
    return {n: _TASKS[n] for n in order}


def get_task(name: str) -> TaskCommands:
    found = tasks()
    if name not in found:
        raise UsageError(f"unknown task {name!r}; choose one of {', '.join(found)}")
    return found[name]


def task_for_kind(kind: str | None) -> TaskCommands | None:
    """The task whose checkpoints have ``kind`` (``None`` when no task claims it)."""
    for commands in tasks().values():
        if kind in commands.checkpoint_kinds():
            return commands
    return None


__all__ = [
    "ExtraCommand",
    "TaskCommands",
    "checkpoint_meta",
    "get_task",
    "register",
    "task_for_kind",
    "tasks",
    "unregister",
]
