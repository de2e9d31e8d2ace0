"""The run state: everything a checkpoint holds, with one :meth:`RunState.save` and one :meth:`RunState.restore`.

A checkpoint (see :mod:`pdevision.engine.checkpoint` for the atomic folder format) holds the model weights, the EMA
weights, and in ``trainer.pt`` the optimizer, scheduler and scaler states, the number of finished epochs (the data
order of the next epoch follows from it: samplers and shard streams are seeded with ``seed + epoch``), the update
count, the seconds of training, the best metric, the per-epoch history, every rank's RNG states and the task's own
extra state. Restoring all of it makes a resumed run bitwise identical to an uninterrupted one (deterministic mode).

Why not timm's ``CheckpointSaver``: it writes one file per checkpoint in place; a run here needs a folder (weights in
safetensors, EMA, trainer state read with ``weights_only=True``) swapped in atomically, so that a crash while
writing never leaves a half-written ``last/`` (the swap is :func:`pdevision.engine.checkpoint.save_checkpoint`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pdevision._values import is_finite_number, is_int
from pdevision.engine.checkpoint import (
    CheckpointError,
    check_finite_weights,
    checkpoint_kind,
    load_trainer_state,
    load_weights,
    read_meta,
    resolve_checkpoint,
)
from pdevision.engine.distributed import DistInfo
from pdevision.engine.runtime import NonFiniteLossError, one_line, rng_state, set_rng_state
from pdevision.engine.save import NoSpaceError, save_checkpoint

log = logging.getLogger(__name__)


@dataclass
class RunState:
    """Model, EMA, optimizer, scheduler, scaler and the counters of a run."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    ema: Any = None  # timm ModelEmaV3
    epoch: int = 0  # epochs finished
    num_updates: int = 0
    elapsed: float = 0.0  # seconds of training steps
    best: float | None = None
    best_row: dict[str, Any] | None = None  # the whole metrics row of the best epoch
    history: list[dict[str, Any]] = field(default_factory=list)
    saved: str | None = None  # the intact ``last/`` checkpoint, for the stop message

    @property
    def ema_module(self) -> nn.Module | None:
        return self.ema.module if self.ema is not None else None

    def intact(self, nan_hint: bool = True) -> str:
        """Which checkpoint a stopped run leaves behind, in words (``nan_hint``: with advice against a NaN stop)."""
        if self.saved is None:
            if not nan_hint:
                return "no intact checkpoint exists yet (nothing to resume)"
            return "no intact checkpoint exists yet (nothing to resume; try a lower --lr, --clip-grad or --amp none)"
        return f"the last intact checkpoint is {self.saved} (resume with --resume)"

    def trainer_state(self, rng: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.epoch - 1,  # index of the last finished epoch (format of earlier versions)
            "sampler_epoch": self.epoch,
            "num_updates": self.num_updates,
            "elapsed": self.elapsed,
            "best": self.best,
            "best_row": self.best_row,
            "history": self.history,
            "rng": rng,
            "task": extra,
        }

    def check_finite(self, metrics: dict[str, Any]) -> None:
        """Refuse to save non-finite weights or validation metrics (the last checkpoint stays intact)."""
        bad = [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]
        modules = [m for m in (self.model, self.ema_module) if m is not None]
        tensors = [t for m in modules for t in (*m.parameters(), *m.buffers()) if t.is_floating_point()]
        if not all(bool(torch.isfinite(t).all()) for t in tensors):
            bad.insert(0, "weights")
        if bad:
            raise NonFiniteLossError(
                f"non-finite {', '.join(bad)} after epoch {self.epoch}; not saved, the run stopped; {self.intact()}"
            )

    def save(
        self,
        run_dir: Path,
        meta: dict[str, Any],
        extra: dict[str, Any],
        info: DistInfo,
        best_module: nn.Module | None = None,
        exports: dict[str, tuple[nn.Module, dict[str, Any]]] | None = None,
    ) -> None:
        """Write ``exports`` (e.g. ``encoder/``), then ``last/``, then ``best/`` when ``best_module`` is given.
        Collective: every rank calls it (RNG states are gathered), rank 0 writes."""
        rng = [rng_state()]
        if info.enabled:
            gathered: list[Any] = [None] * info.world_size
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        if not info.is_main:
            return
        meta = {**meta, "epoch": self.epoch}
        state = self.trainer_state(rng, extra)
        try:
            for name, (module, export_meta) in (exports or {}).items():  # before last/: a crash redoes the epoch
                save_checkpoint(run_dir, name, module, {**export_meta, "epoch": self.epoch})
            folder = save_checkpoint(run_dir, "last", self.model, meta, state, self.ema_module)
            self.saved = f"{folder} (epoch {self.epoch})"
            if best_module is not None:
                save_checkpoint(run_dir, "best", best_module, meta)
        except NoSpaceError as exc:
            raise NoSpaceError(f"{exc} after epoch {self.epoch}; the run stopped; {self.intact(False)}") from exc

    def restore(self, path: str | Path, info: DistInfo, task: Any, epochs: int | None = None) -> Path:
        """Load a ``last/`` checkpoint (or a run folder) into every part of the state; returns the folder.

        The trainer state is checked field by field (:func:`check_trainer_state`), a checkpoint further along than
        ``epochs`` (the run's) is refused, and the model and EMA weights must be finite."""
        folder = resolve_checkpoint(path, prefer=("last",))
        meta = read_meta(folder)
        kind = checkpoint_kind(meta)
        if kind != task.name:
            raise CheckpointError(
                f"{folder} is a {kind or 'unknown'} checkpoint, not a {task.name} one; resume it with its own task"
                + (f" (--task {kind})" if kind else "")
            )
        task.check_resume(meta)
        file = folder / "trainer.pt"
        state = check_trainer_state(load_trainer_state(folder), file)
        epoch = int(state.get("sampler_epoch", state["epoch"] + 1))
        if epochs is not None and epoch > epochs:
            raise CheckpointError(
                f"{folder} has finished {epoch} epochs, more than this run's {epochs}; nothing would be trained "
                f"(resume with --epochs {epoch} or more)"
            )
        task.load_for_resume(self.model, folder)
        check_finite_weights(self.model.state_dict(), folder)
        if self.ema is not None:
            ema_weights = load_weights(folder, ema=True)
            check_finite_weights(ema_weights, folder / "ema.safetensors")
            self.ema.module.load_state_dict(ema_weights)
        _check_same_optimizer(self.optimizer, state["optimizer"], folder)
        if "scheduler" in state:
            _check_scheduler_state(self.scheduler.state_dict(), state["scheduler"], file)
        for name, part in (("optimizer", self.optimizer), ("scheduler", self.scheduler), ("scaler", self.scaler)):
            if name not in state:
                continue
            try:
                part.load_state_dict(state[name])
            except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as exc:
                raise CheckpointError(
                    f"checkpoint file {file}: its {name} state does not fit this run ({one_line(exc, first=True)})"
                ) from exc
        self.epoch = epoch
        self.num_updates = int(state.get("num_updates", 0))
        self.elapsed = float(state.get("elapsed", 0.0))
        self.best = state.get("best", state.get("best_top1"))
        self.best_row = state.get("best_row")
        self.history = list(state["history"])
        task.load_extra_state(state.get("task", {}), self.model, self.ema_module)
        check_finite_weights(self.model.state_dict(), folder)  # the task's extra state may hold weights (heads)
        if self.ema_module is not None:
            check_finite_weights(self.ema_module.state_dict(), folder / "ema.safetensors")
        try:
            set_rng_state(state["rng"][info.rank] if info.rank < len(state["rng"]) else state["rng"][0])
        except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as exc:
            raise CheckpointError(
                f"checkpoint file {file}: its rng states are not this library's ({one_line(exc, first=True)})"
            ) from exc
        self.saved = f"{folder} (epoch {self.epoch})"
        log.info(
            "resumed from %s after epoch %d (%d updates, %.0f s)", folder, self.epoch, self.num_updates, self.elapsed
        )
        return folder


# bounds of the counters in a trainer state: far beyond any real run, far below what overflows a schedule
MAX_EPOCHS = 10**7
MAX_UPDATES = 2**53


def check_trainer_state(state: dict[str, Any], file: Path) -> dict[str, Any]:
    """``state`` (a ``trainer.pt``) when each field the resume reads is present and of its type and range; else a
    :class:`CheckpointError` naming the file and the field."""

    def bad(field: str, why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint file {file}: trainer state field {field!r} {why}; it cannot be resumed")

    for key in ("optimizer", "scaler", "history", "rng"):
        if key not in state:
            raise bad(key, "is missing")
    for key in ("optimizer", "scaler", "scheduler", "task"):
        if key in state and not isinstance(state[key], dict):
            raise bad(key, f"is a {type(state[key]).__name__}, not a dict")
    groups = state["optimizer"].get("param_groups")
    if not (isinstance(groups, list) and groups and all(isinstance(g, dict) for g in groups)):
        raise bad("optimizer", "has no parameter groups (a non-empty list of dicts under 'param_groups')")
    if "sampler_epoch" not in state and "epoch" not in state:
        raise bad("sampler_epoch", "is missing")
    if "sampler_epoch" in state:
        if not is_int(state["sampler_epoch"]) or not 0 <= state["sampler_epoch"] <= MAX_EPOCHS:
            raise bad("sampler_epoch", f"must be an integer from 0 to {MAX_EPOCHS}, got {state['sampler_epoch']!r:.40}")
    if "epoch" in state and (not is_int(state["epoch"]) or not -1 <= state["epoch"] < MAX_EPOCHS):
        raise bad("epoch", f"must be an integer from -1 to {MAX_EPOCHS - 1}, got {state['epoch']!r:.40}")
    if "num_updates" in state and (not is_int(state["num_updates"]) or not 0 <= state["num_updates"] <= MAX_UPDATES):
        raise bad("num_updates", f"must be an integer from 0 to {MAX_UPDATES}, got {state['num_updates']!r:.40}")
    if "elapsed" in state and not (is_finite_number(state["elapsed"]) and state["elapsed"] >= 0):
        raise bad("elapsed", f"must be a finite number of seconds >= 0, got {state['elapsed']!r:.40}")
    for key in ("best", "best_top1"):
        if state.get(key) is not None and not is_finite_number(state[key]):
            raise bad(key, f"must be a finite number or None, got {state[key]!r:.40}")
    if state.get("best_row") is not None and not isinstance(state["best_row"], dict):
        raise bad("best_row", f"is a {type(state['best_row']).__name__}, not a dict")
    if not isinstance(state["history"], list) or not all(isinstance(row, dict) for row in state["history"]):
        raise bad("history", "must be a list of metric rows (dicts)")
    for number, row in enumerate(state["history"], 1):
        if not is_int(row.get("epoch")) or not all(
            isinstance(k, str) and (v is None or isinstance(v, (int, float, str))) for k, v in row.items()
        ):
            raise bad("history", f"row {number} is not a metric row (an integer 'epoch' and named numbers)")
    rng = state["rng"]
    if not isinstance(rng, list) or not rng or not all(isinstance(r, dict) for r in rng):
        raise bad("rng", "must be a non-empty list of RNG states (dicts)")
    return state


def _same_kind(want: Any, have: Any) -> bool:
    """Whether a saved scheduler setting ``have`` has the type of this run's ``want`` (numbers finite)."""
    if want is None or have is None:
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return isinstance(want, bool) and isinstance(have, bool)
    if isinstance(want, (int, float)):
        return is_finite_number(have)
    if isinstance(want, (list, tuple)):
        return isinstance(have, (list, tuple)) and all(_same_kind(want[0], h) if want else True for h in have)
    return type(want) is type(have)


def _check_scheduler_state(current: dict[str, Any], saved: dict[str, Any], file: Path) -> None:
    """timm's schedulers load a state by updating their attributes with it: a setting of another type (a string
    for ``t_initial``) would fail at the first step with a bare ``TypeError``."""
    for key, value in saved.items():
        if key in current and not _same_kind(current[key], value):
            raise CheckpointError(
                f"checkpoint file {file}: trainer state field 'scheduler' has {key} = {value!r:.40}, not a "
                f"{type(current[key]).__name__}; it cannot be resumed"
            )


def _check_same_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any], folder: Path) -> None:
    """A ``CheckpointError`` when the saved optimizer state is another optimizer's: its settings and this one's
    each hold names the other lacks (SGD's ``momentum`` against AdamW's ``betas``), which failed at the first
    step with a bare ``KeyError``. A newer PyTorch only adds settings, so one-sided differences pass."""
    groups = saved.get("param_groups") or [{}]
    have, want = set(groups[0]) - {"params"}, set(optimizer.param_groups[0]) - {"params"}
    if groups[0] and (want - have) and (have - want):
        raise CheckpointError(
            f"{folder} was trained with another optimizer (its settings {sorted(have - want)} against this run's "
            f"{sorted(want - have)}); resume with the --opt it was trained with"
        )


__all__ = ["MAX_EPOCHS", "RunState", "check_trainer_state"]
