"""The one fit loop and its run state, training, evaluation and prediction, checkpoints, distributed set-up."""

from pdevision.engine.checkpoint import CheckpointError, read_meta, resolve_checkpoint, save_checkpoint
from pdevision.engine.evaluate import evaluate_checkpoint, predict_images
from pdevision.engine.loop import LoopConfig, RunContext, fit
from pdevision.engine.modeling import ModelNameError, build_model
from pdevision.engine.runtime import NonFiniteLossError
from pdevision.engine.state import RunState
from pdevision.engine.train import TrainConfig, evaluate_model, train

__all__ = [
    "CheckpointError",
    "LoopConfig",
    "ModelNameError",
    "NonFiniteLossError",
    "RunContext",
    "RunState",
    "TrainConfig",
    "build_model",
    "evaluate_checkpoint",
    "evaluate_model",
    "fit",
    "predict_images",
    "read_meta",
    "resolve_checkpoint",
    "save_checkpoint",
    "train",
]
