"""The run settings every task shares: one :class:`RunConfig`, held (not copied) by each task's configuration.

A field left at ``None`` takes the task's default (its recipe: :meth:`pdevision.engine.task.Task.run_defaults`),
then the library's (:data:`RUN_DEFAULTS`); :func:`resolve_run` does both, and the loop records the result in
``config.json``. The command line fills a ``RunConfig`` from the same flags for every task
(:func:`pdevision.tasks.args.add_run_arguments`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from timm.optim import get_optimizer_info

from pdevision.engine.checkpoint import resumed_run_folder

# what a field left at None becomes when neither the user nor the task's recipe sets it
RUN_DEFAULTS: dict[str, Any] = {
    "epochs": 10,
    "batch_size": 64,
    "lr_base": 1e-3,
    "lr_base_batch": 512,
    "opt": "adamw",
    "momentum": 0.9,
    "weight_decay": 0.05,
    "min_lr": 1e-5,
    "warmup_epochs": 0.0,
    "ema_decay": 0.0,
    "clip_grad": 0.0,
    "rank_seed": False,
    "find_unused_parameters": False,
}


@dataclass
class RunConfig:
    """Every knob of the loop (:func:`pdevision.engine.loop.fit`). ``None``: the task's default, then the library's.

    ``clip_grad`` and ``ema_decay`` of 0 mean off. ``lr`` is absolute; without it the peak rate is
    ``lr_base x global batch / lr_base_batch`` (the recipe's rate at its own batch, scaled linearly).
    """

    output: str | None = None  # None: the resumed run's own folder with ``resume``, else ``runs/run``
    epochs: int | None = None
    batch_size: int | None = None  # per process
    lr: float | None = None
    lr_base: float | None = None
    lr_base_batch: int | None = None
    opt: str | None = None  # any name of timm.optim.create_optimizer_v2: sgd, momentum, nesterov, adamw, lamb, ...
    momentum: float | None = None  # SGD-type optimizers
    betas: tuple[float, float] | None = None  # None: the optimizer's default
    weight_decay: float | None = None
    min_lr: float | None = None
    warmup_epochs: float | None = None
    clip_grad: float | None = None  # gradient-norm clip; 0: off
    ema_decay: float | None = None  # EMA of the weights; 0: off
    sched: str = "cosine"  # any timm scheduler name
    warmup_lr_ratio: float = 0.01  # warm-up starts at this fraction of the peak lr
    fused_opt: bool = True  # Adam, AdamW, SGD: PyTorch's fused update (one kernel for all parameters), same result
    fused_kernels: bool = True  # CPU: the model's modules on the oneDNN kernels (pdevision.fastpath.accelerate)
    amp: str = "none"  # none | bf16 | fp16 (CUDA)
    compile: bool = False  # torch.compile the training model
    seed: int = 0
    rank_seed: bool | None = None  # reseed each rank differently after the model is built (random crops, masks)
    deterministic: bool = False
    workers: int = 0
    threads: int | None = None  # torch's CPU threads during the run (None: torch's own, one per core)
    device: str = "auto"
    resume: str | None = None
    overwrite: bool = False  # start a new run in a folder that holds one (else that is refused)
    stop_after_epochs: int | None = None  # stop (as if interrupted) after this many epochs of the schedule
    max_train_batches: int | None = None  # per epoch, for smoke runs
    time_budget: float | None = None  # seconds of training steps; stops early, the schedule follows it
    drop_last: bool | None = None  # None: when the train set holds at least two global batches
    find_unused_parameters: bool | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.output is None:  # a resumed run continues in its own folder, never in a default one
            if self.resume is None:
                self.output = "runs/run"
            else:
                folder = resumed_run_folder(self.resume)
                if folder is None:
                    raise ValueError(
                        f"--resume {self.resume} is a checkpoint outside a run folder (not RUN/last): give --output, "
                        "a new or empty folder for the continued run"
                    )
                self.output = str(folder)

    def peak_lr(self, world_size: int = 1) -> float:
        """The absolute peak learning rate for ``world_size`` processes (a resolved configuration)."""
        if self.lr is not None:
            return float(self.lr)
        assert self.lr_base is not None and self.lr_base_batch is not None and self.batch_size is not None
        return self.lr_base * self.batch_size * world_size / self.lr_base_batch


def resolve_run(run: RunConfig, defaults: Mapping[str, Any] | None = None) -> RunConfig:
    """``run`` with every ``None`` filled from ``defaults`` (the task's), then :data:`RUN_DEFAULTS`; checked."""
    defaults = dict(defaults or {})
    unknown = sorted(set(defaults) - {f.name for f in dataclasses.fields(RunConfig)})
    if unknown:
        raise TypeError(f"run defaults name settings RunConfig does not have: {unknown}")
    filled = {}
    for f in dataclasses.fields(RunConfig):
        value = getattr(run, f.name)
        if value is None and f.name in defaults:
            value = defaults[f.name]
        if value is None and f.name in RUN_DEFAULTS:
            value = RUN_DEFAULTS[f.name]
        filled[f.name] = value
    out = RunConfig(**filled)
    check_run(out)
    return out


def check_run(run: RunConfig) -> None:
    """A ``ValueError`` naming the first setting out of its range (the Python API gets the CLI's checks)."""
    positive_ints = ("epochs", "batch_size", "lr_base_batch", "stop_after_epochs", "max_train_batches")
    for name in positive_ints:
        value = getattr(run, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name.replace('_', ' ')} must be a positive integer, got {value!r}")
    positive = ("lr", "lr_base", "time_budget")
    for name in positive:  # (an infinite rate is allowed: the loop's non-finite stop reports it)
        value = getattr(run, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name.replace('_', ' ')} must be a positive number, got {value!r}")
    non_negative = ("weight_decay", "min_lr", "warmup_epochs", "clip_grad")
    for name in non_negative:
        value = getattr(run, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name.replace('_', ' ')} must be a number >= 0, got {value!r}")
    if run.ema_decay is not None and not 0 <= run.ema_decay < 1:
        raise ValueError(f"EMA decay must be in [0, 1), got {run.ema_decay!r}")
    if run.momentum is not None and not 0 <= run.momentum <= 1:
        raise ValueError(f"momentum must be in [0, 1], got {run.momentum!r}")
    if not 0 <= run.workers <= 128:
        raise ValueError(f"workers must be in [0, 128], got {run.workers!r}")
    if run.threads is not None and (
        not isinstance(run.threads, int) or isinstance(run.threads, bool) or not 1 <= run.threads <= 1024
    ):
        raise ValueError(f"threads must be an integer from 1 to 1024, got {run.threads!r}")
    if run.opt is not None:
        try:  # timm's parse: an optional "lookahead_" prefix, the optimizer's name after the last "_"
            get_optimizer_info(str(run.opt).lower().split("_")[-1])
        except ValueError:
            raise ValueError(
                f"optimizer (--opt) {run.opt!r} is not one of timm's (e.g. sgd, momentum, adamw, lamb, lion; "
                "timm.optim.list_optimizers() lists them, a 'lookahead_' prefix adds Lookahead)"
            ) from None
    if run.amp not in ("none", "bf16", "fp16"):
        raise ValueError(f"amp must be none, bf16 or fp16, got {run.amp!r}")


__all__ = ["RUN_DEFAULTS", "RunConfig", "check_run", "resolve_run"]
