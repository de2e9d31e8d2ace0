"""Image restoration tasks for the one fit loop: ``denoise`` (Gaussian noise) and ``dejpeg`` (JPEG artefacts), as
a package like ``classify`` and ``pretrain``: the settings (:mod:`.config`), the task of the loop (:mod:`.task`), a
checkpoint applied to images (:mod:`.apply`) and the command line (:mod:`.commands`, which registers both tasks and
``pdevision restore``)."""

from pdevision.tasks.restore import commands
from pdevision.tasks.restore.apply import (
    load_restoration_model,
    restoration_model_from_meta,
    restore_file,
    restore_image,
)
from pdevision.tasks.restore.commands import RestoreCommands, RestoreOptions, run_restore
from pdevision.tasks.restore.config import (
    DATA_AND_MODEL,
    DEFAULT_BASELINES,
    RESTORE_TASKS,
    RestoreConfig,
    parse_sigma,
)
from pdevision.tasks.restore.task import HeldOutImages, RestoreTask, train

__all__ = [
    "DATA_AND_MODEL",
    "DEFAULT_BASELINES",
    "RESTORE_TASKS",
    "HeldOutImages",
    "RestoreCommands",
    "RestoreConfig",
    "RestoreOptions",
    "RestoreTask",
    "commands",
    "load_restoration_model",
    "parse_sigma",
    "restoration_model_from_meta",
    "restore_file",
    "restore_image",
    "run_restore",
    "train",
]
