"""The one fit loop and the run mechanics: run settings, the task interface, run state, checkpoints (and the one
checkpoint-to-model path), distributed set-up, locks. Nothing here knows a particular task."""

from pdevision.engine.checkpoint import CheckpointError, checkpoint_kind, read_meta, resolve_checkpoint
from pdevision.engine.config import RunConfig, resolve_run
from pdevision.engine.loop import fit
from pdevision.engine.modeling import ModelNameError, create_model, load_checkpoint_model, load_classifier
from pdevision.engine.runtime import NonFiniteLossError
from pdevision.engine.save import save_checkpoint
from pdevision.engine.state import RunState
from pdevision.engine.task import RunContext, Task

__all__ = [
    "CheckpointError",
    "ModelNameError",
    "NonFiniteLossError",
    "RunConfig",
    "RunContext",
    "RunState",
    "Task",
    "checkpoint_kind",
    "create_model",
    "fit",
    "load_checkpoint_model",
    "load_classifier",
    "read_meta",
    "resolve_checkpoint",
    "resolve_run",
    "save_checkpoint",
]
