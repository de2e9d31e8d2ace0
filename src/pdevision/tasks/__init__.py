"""Tasks: one module or subpackage per task (classify, segment, detect, restore: denoise and dejpeg, pretrain), each
with its configuration (holding a :class:`~pdevision.engine.config.RunConfig`), its recipes, its
:class:`~pdevision.engine.task.Task`, its evaluation and prediction, and its command-line flags, registered in
:mod:`pdevision.tasks.registry`, from which the ``pdevision`` command is built."""

from pdevision.tasks import detect, export, restore, segment
from pdevision.tasks.classify import commands as classify_commands
from pdevision.tasks.pretrain import commands as pretrain_commands
from pdevision.tasks.registry import (
    Command,
    TaskCommands,
    commands,
    get_task,
    register,
    register_command,
    task_for_kind,
    tasks,
)

__all__ = [
    "Command",
    "TaskCommands",
    "classify_commands",
    "commands",
    "detect",
    "export",
    "get_task",
    "pretrain_commands",
    "register",
    "register_command",
    "restore",
    "segment",
    "task_for_kind",
    "tasks",
]
