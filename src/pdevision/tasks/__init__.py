"""Tasks: what differs per task (datasets, model, training step, evaluation); the loop in ``engine`` runs them."""

from pdevision.tasks.base import Task

__all__ = ["Task"]
