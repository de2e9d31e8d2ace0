"""Tasks: one module or subpackage per task (classify, segment, detect, restore: denoise and dejpeg, pretrain), each
with its configuration (holding a :class:`~pdevision.engine.config.RunConfig`), its recipes, its
:class:`~pdevision.engine.task.Task`, its evaluation and prediction, and its command-line flags, registered in
:mod:`pdevision.tasks.registry`, from which the ``pdevision`` command is built."""

from pdevision.tasks import detect, restore, segment
from pdevision.tasks.classify import commands as classify_commands
from pdevision.tasks.pretrain import commands as pretrain_commands
from pdevision.tasks.registry import ExtraCommand, TaskCommands, get_task, register, task_for_kind, tasks

__all__ = [
    "ExtraCommand",
    "TaskCommands",
    "classify_commands",
    "detect",
    "get_task",
    "pretrain_commands",
    "register",
    "restore",
    "segment",
    "task_for_kind",
    "tasks",
]
