"""The task registry: what the ``pdevision`` command knows of each task, in one place per task.

A task registers a :class:`TaskCommands`: its name (``pdevision train --task NAME``, and the ``kind`` of its
checkpoints), its configuration dataclass, whose fields with a :class:`~pdevision.engine.config.Flag` are the flags
it takes on top of the shared run flags (:func:`pdevision.tasks.args.add_run_arguments`), what it runs, and, where
it has them, the flags of its ``eval`` and ``predict`` (chosen by a checkpoint's ``kind``; the flags every task shares
there, ``--checkpoint`` among them, are declared once: :class:`CheckpointOptions`). A command of its own
(``restore``, ``export``) is a :class:`Command` registered with :func:`register_command`. The command line is built
from the registry: adding a task is a module with a ``Task``, a ``TaskCommands`` and a call of :func:`register` (or
an entry point in the ``pdevision.tasks`` group), with no edit of :mod:`pdevision.cli`.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

from pdevision.engine import validators as V
from pdevision.engine.config import CheckpointOptions, Flag, RunConfig, setting
from pdevision.engine.loop import fit
from pdevision.engine.runtime import one_line
from pdevision.engine.task import Task
from pdevision.errors import UsageError
from pdevision.tasks import args as A

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Command:
    """A command of its own (``pdevision export``, ``restore``, ``bench``): its one-line help, the dataclass whose
    :func:`~pdevision.engine.config.setting` fields are its flags (:func:`~pdevision.tasks.args.add_config_arguments`;
    ``flags``: what the command changes of a field's Flag, e.g. its help), and what it runs: parsed flags in, the
    text printed and the exit code out. ``subcommands``: the commands under it (``viz erf``)."""

    help: str
    options: type | None = None
    run: Callable[[argparse.Namespace], tuple[str, int]] | None = None
    flags: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    subcommands: Mapping[str, Command] = field(default_factory=dict)


DEVICE_HELP = "auto, cpu, cuda, cuda:1, ..."


@dataclass
class EvalOptions(CheckpointOptions):
    """``pdevision eval``'s flags of every task (a task adds its own: ``TaskCommands.eval_options``)."""

    output: str | None = setting(
        None, V.output_folder, Flag(help="folder for the results (default: beside it, RUN/eval-best)")
    )
    device: str = setting("auto", V.device, Flag(help=DEVICE_HELP))


@dataclass
class PredictOptions(CheckpointOptions):
    """``pdevision predict``'s flags of every task (a task adds its own: ``TaskCommands.predict_options``)."""

    images: list[str] = setting(  # noqa: RUF009
        None, V.path, Flag(name="images", nargs="+", help="image files or folders of images"), factory=list
    )
    device: str = setting("auto", V.device, Flag(help=DEVICE_HELP))


@dataclass
class TaskOption:
    """``train --task``: the task whose flags the command takes."""

    task: str = setting("classify", None, Flag())  # its choices and help: the registry's tasks


@dataclass
class ConfigOption:
    """``train`` / ``pretrain --config``: flag values from a file (:mod:`pdevision.tasks.config_file`)."""

    config: str | None = setting(
        None,
        V.path,
        Flag(
            name="--config",
            aliases=("-c",),
            metavar="FILE",
            help="YAML or JSON file of flag values (keys as a run's config.json names them: batch_size, lr, ...); a "
            "run's config.json repeats the run; flags given here win over the file",
        ),
    )


class TaskCommands:
    """What the command line needs of a task. Set ``config_class`` (a dataclass holding a ``run``
    :class:`RunConfig`, whose fields with a :class:`~pdevision.engine.config.Flag` are the task's flags) and
    ``task_class`` (the :class:`~pdevision.engine.task.Task` the loop runs); ``eval_options`` / ``predict_options``
    with ``evaluate`` / ``predict`` where the task has them. A task whose flags are not fields (a plug-in) overrides
    ``add_arguments``, ``config`` and ``run``."""

    name: str = ""
    help: str = ""
    default_output: str = "runs/train"
    kinds: tuple[str, ...] = ()  # checkpoint kinds that eval/predict route here (default: the task's name)
    skip_run_flags: tuple[str, ...] = ()  # shared run flags the task does not take (refused, not ignored)
    run_flag_defaults: ClassVar[dict[str, Any]] = {}  # for --help: the task's own defaults of run flags
    # optional packages (module, extra) that train and eval need, checked before they start (predict: on use)
    requires: tuple[tuple[str, str], ...] = ()
    config_class: type | None = None  # the task's configuration: its fields with a Flag are its flags
    task_class: type[Task] | None = None  # what the loop runs: task_class(config)
    skip_flags: tuple[str, ...] = ()  # flags of config_class the task does not take
    # the task's own flags of eval and predict (dataclasses of setting() fields; None: the task has none)
    eval_options: type | None = None
    predict_options: type | None = None

    def checkpoint_kinds(self) -> tuple[str, ...]:
        return self.kinds or (self.name,)

    # train
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The task's own flags of ``pdevision train --task NAME``: the fields of ``config_class``."""
        if self.config_class is not None:
            A.add_config_arguments(parser, self.config_class, self.skip_flags, fill=self.fill(), flags=self.flags())

    def fill(self) -> dict[str, str]:
        """Words put in place of braces in the group titles and help of the task's flags."""
        return {}

    def flags(self) -> dict[str, dict[str, Any]]:
        """What the task changes of its fields' flags (field name -> ``Flag`` keywords, e.g. choices)."""
        return {}

    def config(self, args: argparse.Namespace, run: RunConfig) -> Any:
        """The task's configuration from parsed flags (``run``: the shared run settings)."""
        if self.config_class is None:
            raise NotImplementedError
        return self.config_class(**A.task_fields(args, self.config_class), run=run)

    def run(self, config: Any) -> dict[str, Any]:
        """Train as ``config`` says, through the one loop; the run summary."""
        if self.task_class is None:
            raise NotImplementedError
        return fit(self.task_class(config), config.run)

    def report(self, summary: dict[str, Any], config: Any) -> str:
        """The line printed after training."""
        return f"{self.name}: {summary['status']}, {summary['epochs_run']} epochs; run folder {config.run.output}"

    def evaluate(self, args: argparse.Namespace) -> str:
        """``pdevision eval``: ``args.checkpoint``, whose metadata the command line has read already
        (:func:`checkpoint_meta`), and the task's eval flags; the text printed."""
        raise UsageError(f"{self.name} checkpoints have no evaluation")

    def predict(self, args: argparse.Namespace) -> tuple[str, int]:
        """``pdevision predict``: as :meth:`evaluate`, on ``args.images``; the text printed and the exit code."""
        raise UsageError(f"{self.name} checkpoints have no prediction")

    def extra_commands(self) -> dict[str, Command]:
        """Commands a plug-in task adds (registered with :func:`register_command` when it loads)."""
        return {}


def checkpoint_meta(args: argparse.Namespace) -> dict[str, Any] | None:
    """The metadata of ``args.checkpoint`` as ``pdevision eval`` and ``predict`` read it, once, before parsing (to
    choose the task); ``None`` where it was not read (the loader reads it then:
    :func:`~pdevision.engine.modeling.load_checkpoint_model`)."""
    return getattr(args, "checkpoint_meta", None)


_TASKS: dict[str, TaskCommands] = {}
_COMMANDS: dict[str, Command] = {}
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


def register_command(name: str, command: Command) -> Command:
    """Add a command of its own (``pdevision NAME``); returns it."""
    if name in _COMMANDS and _COMMANDS[name] != command:
        raise ValueError(f"a command named {name!r} is registered already")
    _COMMANDS[name] = command
    return command


def commands() -> dict[str, Command]:
    """The commands of their own registered by the tasks' modules and plug-ins (``export``, ``restore``)."""
    _load_entry_points()
    return dict(_COMMANDS)


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
            extra = commands.extra_commands()
            register(commands)
            for name, command in extra.items():
                if name not in _COMMANDS:
                    register_command(name, command)
        except Exception as exc:
            log.warning("task entry point %s (%s) was not loaded: %s", ep.name, ep.value, one_line(exc))


def add_command_arguments(
    parser: argparse.ArgumentParser, *options: type | None, flags: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """The flags of the dataclasses ``options`` (each field with a Flag), in turn; ``flags``: what the command
    changes of a field's Flag (field name -> Flag keywords)."""
    for cls in options:
        if cls is not None:
            A.add_config_arguments(parser, cls, flags=flags)


def check_task_parsers(commands: TaskCommands) -> None:
    """Build every parser the command line builds for ``commands`` (train, eval, predict and its extra commands,
    each beside the flags the command line adds there); what a task's flags raise (argparse's "conflicting option
    string" for a flag that is a run flag, any fault of its own) is raised here, at load time, where the registry
    names the plug-in, instead of while the command's parser is built."""
    train = argparse.ArgumentParser(add_help=False)
    A.add_run_arguments(
        train, commands.default_output, skip=commands.skip_run_flags, defaults=commands.run_flag_defaults
    )
    add_command_arguments(train, TaskOption, ConfigOption)
    where = "its add_arguments"
    try:
        commands.add_arguments(train)
        for which, shared, own in (
            ("eval", EvalOptions, commands.eval_options),
            ("predict", PredictOptions, commands.predict_options),
        ):
            where = f"its {which}_options"
            add_command_arguments(argparse.ArgumentParser(add_help=False), shared, own)
        where = "its extra_commands"
        for name, extra in commands.extra_commands().items():
            where = f"the options of its command {name!r}"
            add_command_arguments(argparse.ArgumentParser(add_help=False), extra.options, flags=extra.flags)
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
    "DEVICE_HELP",
    "CheckpointOptions",
    "Command",
    "ConfigOption",
    "EvalOptions",
    "PredictOptions",
    "TaskCommands",
    "TaskOption",
    "add_command_arguments",
    "checkpoint_meta",
    "commands",
    "get_task",
    "register",
    "register_command",
    "task_for_kind",
    "tasks",
    "unregister",
]
