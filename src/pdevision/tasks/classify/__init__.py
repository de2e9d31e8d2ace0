"""Image classification (``pdevision train``, the default task): configuration, task, evaluation, prediction,
corruption robustness, and its command-line entry."""

from __future__ import annotations

from typing import Any

from pdevision._optional import require_all
from pdevision.engine.loop import fit
from pdevision.tasks.classify.config import ClassifyConfig
from pdevision.tasks.classify.evaluate import evaluate_checkpoint, evaluate_model
from pdevision.tasks.classify.predict import iter_predictions, predict_images
from pdevision.tasks.classify.task import REQUIRES, ClassifyTask


def train(config: ClassifyConfig) -> dict[str, Any]:
    """Train ``config.model`` and return the run summary (also written to ``summary.json``)."""
    require_all(REQUIRES)
    return fit(ClassifyTask(config), config.run)


__all__ = [
    "ClassifyConfig",
    "ClassifyTask",
    "evaluate_checkpoint",
    "evaluate_model",
    "iter_predictions",
    "predict_images",
    "train",
]
