"""Training, evaluation and prediction loops, checkpoints, distributed set-up."""

from pdevision.engine.checkpoint import CheckpointError, read_meta, resolve_checkpoint, save_checkpoint
from pdevision.engine.evaluate import evaluate_checkpoint, predict_images
from pdevision.engine.modeling import ModelNameError, build_model
from pdevision.engine.runtime import NonFiniteLossError
from pdevision.engine.train import TrainConfig, evaluate_model, train

__all__ = [
    "CheckpointError",
    "ModelNameError",
    "NonFiniteLossError",
    "TrainConfig",
    "build_model",
    "evaluate_checkpoint",
    "evaluate_model",
    "predict_images",
    "read_meta",
    "resolve_checkpoint",
    "save_checkpoint",
    "train",
]
