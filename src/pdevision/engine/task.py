"""The task interface: what a task supplies to the one fit loop (:func:`pdevision.engine.loop.fit`).

A task says only what differs between classification, pretraining, restoration, segmentation, ...:

* ``name``: the task's name, written as ``kind`` into every checkpoint of its runs.
* ``datasets()`` -> ``(train_set, val_set)``: map-style or iterable datasets (``val_set`` may be ``None``);
  the loop calls it first, once, on every rank. An optional ``collate_fn`` attribute is passed to the loaders.
  An iterable train set (a stream of shards) splits itself across ranks and workers and has ``set_epoch(epoch)``
  and ``__len__`` (samples per rank); a map-style one is sampled by the loop (same order on resume).
* ``create_model()`` -> the model to train, on the CPU; called after ``datasets()``.
* ``train_step(model, batch)`` -> ``(loss, logs)``: ``batch`` is already on the device (tensors anywhere in
  tuples, lists, dicts), ``model`` may be wrapped (DDP, ``torch.compile``), autocast is on. ``loss`` is the scalar
  tensor to minimise, ``logs`` a dict of floats (batch means), averaged over the epoch into ``train_<key>``.
* ``evaluate(model, ctx)`` -> dict of float metrics over ``val_set`` (``val_<key>`` in ``metrics.csv``); use
  ``ctx.loader(dataset)`` (sharded across ranks), ``ctx.to_device``, ``ctx.autocast()`` and ``ctx.sum`` (sums over
  ranks). With EMA on, the loop evaluates the EMA weights too (``val_<key>_ema``).
* ``best_metric`` (a key of ``evaluate``'s dict, or ``None`` for no ``best/`` checkpoint) and
  ``higher_is_better``; the loop keeps the whole row of the best epoch (``summary.json``: ``best_row``).
* ``checkpoint_meta()`` -> JSON-serialisable metadata stored with every checkpoint (model name, classes, image
  size, normalisation, ...): what is needed to rebuild the model without the task. The loop adds ``kind``.

The loop sets ``run``, the run settings as :func:`~pdevision.engine.loop.fit` resolved them (the task's
``run_defaults()`` filled in), before it calls ``datasets()``; ``ctx.run`` is the same, with the batch fitted to
the training set. A task reads them there and resolves nothing itself.

Optional members (defaults do nothing): ``run_defaults()`` -> the task's (recipe's) values for
:class:`~pdevision.engine.config.RunConfig` fields the user left at ``None``; ``config_json()`` -> the task's own
settings for ``config.json``; ``prepare(model, ctx)`` once before EMA and the optimizer are made;
``check_resume(meta)`` to refuse a checkpoint of the same kind but other settings; ``load_for_resume(model, folder)``
to load the weights with clearer errors; ``exports(model)`` -> ``{name: (module, meta)}`` extra checkpoint folders
written before ``last/`` at every epoch (so a run killed while exporting redoes the export on resume);
``extra_state()`` / ``load_extra_state(state, model, ema)`` for task state in ``trainer.pt``; ``saving(model, ema)``,
a context manager around the checkpoint writes; ``summary(run)`` -> extra keys for ``summary.json``;
``finish(model, run_dir)`` on rank 0 at the end (figures; their names in ``run_files``, so that a new run refuses
a folder where a file of that name is not a run's); ``epoch_log(row)`` -> one line for the log.

Minimal example (a regression task; ``fit`` does the rest)::

    import torch
    from pdevision.engine import RunConfig, Task, fit

    class Regress(Task):
        name = "regress"
        best_metric, higher_is_better = "mse", False

        def datasets(self):
            x = torch.randn(256, 8)
            data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
            return data, data

        def create_model(self):
            return torch.nn.Linear(8, 1)

        def train_step(self, model, batch):
            x, y = batch
            loss = torch.nn.functional.mse_loss(model(x), y)
            return loss, {}

        @torch.no_grad()
        def evaluate(self, model, ctx):
            total, n = 0.0, 0
            for x, y in ctx.loader(self.val_set):
                x, y = ctx.to_device((x, y))
                total += torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
                n += len(y)
            total, n = ctx.sum([total, n])
            return {"mse": total / max(n, 1)}

        def checkpoint_meta(self):
            return {"model": "linear"}

    summary = fit(Regress(), RunConfig(output="runs/regress", epochs=3, lr=0.1, opt="sgd"))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from pdevision.engine.checkpoint import load_weights
from pdevision.engine.config import RunConfig
from pdevision.engine.distributed import DistInfo, all_reduce_sum
from pdevision.engine.runtime import autocast


@dataclass
class RunContext:
    """What a task sees of the run: device, ranks, precision, loaders; ``run``, every setting as resolved."""

    device: torch.device
    info: DistInfo
    amp: str
    batch_size: int
    workers: int
    run_dir: Path
    collate_fn: Callable | None = None
    train_loader: DataLoader | None = None
    steps_per_epoch: int = 0
    run: RunConfig | None = None  # the run's settings, recipe defaults filled in (None: a context made by hand)

    def loader(self, dataset: Dataset, batch_size: int | None = None) -> DataLoader:
        """This rank's shard of ``dataset`` (every ``world_size``-th sample), in order."""
        if not isinstance(dataset, IterableDataset):
            dataset = torch.utils.data.Subset(dataset, range(self.info.rank, len(dataset), self.info.world_size))
        size = batch_size or self.batch_size
        return DataLoader(dataset, batch_size=size, num_workers=self.workers, collate_fn=self.collate_fn)

    def to_device(self, batch: Any) -> Any:
        """Tensors anywhere in tuples, lists and dicts moved to the device; image batches (4-D floating point) in
        channels-last memory where the run says so (``--channels-last``)."""
        if isinstance(batch, torch.Tensor):
            batch = batch.to(self.device, non_blocking=True)
            if self.run is not None and self.run.channels_last and batch.dim() == 4 and batch.is_floating_point():
                batch = batch.contiguous(memory_format=torch.channels_last)
            return batch
        if isinstance(batch, (list, tuple)):
            return type(batch)(self.to_device(b) for b in batch)
        if isinstance(batch, dict):
            return {k: self.to_device(v) for k, v in batch.items()}
        return batch

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.amp)

    def sum(self, values: list[float]) -> list[float]:
        """Sums over ranks (identity in one process)."""
        return all_reduce_sum([float(v) for v in values], self.info, self.device)


class Task:
    """Base class of a task; override the required members (see the module docstring)."""

    name: str = "task"
    best_metric: str | None = "loss"
    higher_is_better: bool = False
    collate_fn: Callable | None = None
    run_files: tuple[str, ...] = ()  # names this task writes into the run folder (``finish``'s figures)
    run: RunConfig | None = None  # set by the loop: the run settings as fit resolved them
    train_set: Dataset | None = None
    val_set: Dataset | None = None

    # required
    def datasets(self) -> tuple[Dataset, Dataset | None]:
        raise NotImplementedError

    def create_model(self) -> nn.Module:
        raise NotImplementedError

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, ctx: RunContext) -> dict[str, float]:
        return {}

    def checkpoint_meta(self) -> dict[str, Any]:
        return {}

    # optional
    def run_defaults(self) -> dict[str, Any]:
        """The task's values for the :class:`~pdevision.engine.config.RunConfig` fields left at ``None``."""
        return {}

    def config_json(self) -> dict[str, Any]:
        """The task's own settings, written to ``config.json`` beside the resolved run settings."""
        return {}

    def prepare(self, model: nn.Module, ctx: RunContext) -> None:
        """Once, with the model on the device, before the EMA copy and the optimizer are made."""

    def check_resume(self, meta: dict[str, Any]) -> None:
        """Raise :class:`~pdevision.engine.checkpoint.CheckpointError` for a checkpoint this task cannot resume
        (the loop has checked its ``kind`` already)."""

    def load_for_resume(self, model: nn.Module, folder: Path) -> None:
        """Load the weights of ``folder`` into ``model`` (default: strict ``load_state_dict``)."""
        model.load_state_dict(load_weights(folder))

    def exports(self, model: nn.Module) -> dict[str, tuple[nn.Module, dict[str, Any]]]:
        """Extra checkpoint folders ``{name: (module, meta)}`` written with every ``last/``."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any], model: nn.Module, ema: nn.Module | None) -> None:
        """On resume, after the model and EMA weights are loaded."""

    @contextlib.contextmanager
    def saving(self, model: nn.Module, ema: nn.Module | None) -> Iterator[None]:
        yield

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        """Extra keys for ``summary.json``; ``run`` is the loop's summary (status, epochs, best, best row)."""
        return {}

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """Rank 0, after the last epoch: figures and other run artefacts."""

    def epoch_log(self, row: dict[str, Any]) -> str:
        keys = [k for k in row if k.startswith(("train_", "val_")) and isinstance(row[k], float)]
        return "  ".join(f"{k} {row[k]:.4g}" for k in keys)


__all__ = ["RunContext", "Task"]
