"""Where a run's scalars go besides ``metrics.csv``: TensorBoard (when installed) and any experiment tracker.

A tracker is any object with the two methods of :class:`RunLogger`; :func:`pdevision.engine.fit` takes a list of
them (``fit(task, run, loggers=[...])``), and ``--logger wandb`` / ``--logger mlflow`` (``RunConfig.logger``) make
one of the two below, importing its package only then. Each gets, at every optimizer update, ``train/step_loss``
and ``train/lr`` (step: the update count), and at every epoch's end the epoch's row (``epoch/<column>``, at the
same step count). A tracker of your own::

    class PrintLogger:
        def log(self, scalars: dict[str, float], step: int) -> None:
            print(step, scalars)

        def close(self) -> None:
            pass

    fit(task, run, loggers=[PrintLogger()])
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pdevision.errors import UsageError


@runtime_checkable
class RunLogger(Protocol):
    """What the loop calls on a tracker: ``log`` with scalars by name at an update count, ``close`` at the end."""

    def log(self, scalars: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardLogger:
    """Per-update scalars into the run's ``tensorboard/`` events (the epoch rows are written there by the loop)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            if key.startswith("train/"):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.flush()


def _package(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise UsageError(
            f"--logger {name} needs the {name} package, which is not installed; run: pip install {name}"
        ) from None


class WandbLogger:
    """Weights & Biases: one W&B run per training run, named after the run folder, with its settings as config."""

    def __init__(self, run_dir: Path, settings: dict[str, Any]) -> None:
        self.wandb = _package("wandb")
        self.run = self.wandb.init(name=run_dir.name, dir=str(run_dir), config=settings)

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    """MLflow: one MLflow run per training run (``MLFLOW_TRACKING_URI`` says where), its settings as parameters."""

    def __init__(self, run_dir: Path, settings: dict[str, Any]) -> None:
        self.mlflow = _package("mlflow")
        self.active = self.mlflow.start_run(run_name=run_dir.name)
        self.mlflow.log_params({k: str(v)[:500] for k, v in settings.items()})

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics({k.replace("/", "_"): v for k, v in scalars.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


TRACKERS = {"wandb": WandbLogger, "mlflow": MlflowLogger}


def check_tracker(name: str) -> None:
    """A :class:`UsageError` before the run starts when the package of ``--logger name`` is not installed."""
    _package(name)


def make_logger(name: str, run_dir: Path, settings: dict[str, Any]) -> RunLogger:
    """The tracker ``--logger name`` names, for the run in ``run_dir`` with ``settings`` (its ``config.json``)."""
    return TRACKERS[name](run_dir, settings)


__all__ = ["TRACKERS", "MlflowLogger", "RunLogger", "TensorBoardLogger", "WandbLogger", "check_tracker", "make_logger"]
