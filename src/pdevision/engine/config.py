"""The run settings every task shares: one :class:`RunConfig`, held (not copied) by each task's configuration.

A field left at ``None`` takes the task's default (its recipe: :meth:`pdevision.engine.task.Task.run_defaults`),
then the library's (:data:`RUN_DEFAULTS`); :func:`resolve_run` does both, once, in
:func:`pdevision.engine.loop.fit`, which hands the result on (to the run state, the task, ``config.json``). Each field
is declared once, with :func:`setting`: its default, its value type (:mod:`pdevision.engine.validators`) and its
:class:`Flag`; the command line's run flags of every task (:func:`pdevision.tasks.args.add_run_arguments`) and
:func:`check_run` are made from the fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdevision.engine import validators as V
from pdevision.engine.checkpoint import resumed_run_folder
from pdevision.errors import UsageError

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


SCHEDULE = "run: schedule and optimiser (default: the task's recipe)"
LOGGERS = ("wandb", "mlflow")  # the trackers --logger names (pdevision.engine.loggers)
MACHINE = "run: precision, devices, resume, stopping"


@dataclass(frozen=True)
class Flag:
    """How the command line sets a :class:`RunConfig` field: the metadata ``"flag"`` of the field (:func:`setting`).

    The flag is ``--field-name`` unless ``name`` says otherwise (a name without dashes: a positional argument); it
    stores into the field's name. ``group``: the title of its group in ``--help`` (empty: the command's options). A
    ``bool`` field takes no value: the flag sets it to the opposite of its default. ``off``: a second flag that sets
    the field to a value, ``(flag, value, help)`` (``--no-ema``: EMA decay 0), whatever the first flag says.
    ``aliases``: other names of the flag (``-c`` of ``--config``), before it. ``nargs``, ``const``, ``metavar``,
    ``required``: argparse's (``nargs`` for a field that holds several values: a
    tuple, the flag gives a list). ``one_of``: the name of a set of flags of which exactly one must be given."""

    group: str = ""
    help: str | None = None
    name: str = ""
    choices: tuple[str, ...] | None = None
    off: tuple[str, Any, str] | None = None
    nargs: str | None = None
    const: Any = None
    metavar: str | None = None
    required: bool = False
    one_of: str | None = None
    aliases: tuple[str, ...] = ()


def setting(
    default: Any = None, type: Any = None, flag: Flag | None = None, check: Any = None, factory: Any = None
) -> Any:
    """A field of :class:`RunConfig` (or of a task's configuration): its default (or the ``factory`` that makes
    it), the value type that parses its flag's text (:mod:`pdevision.engine.validators`), the flag (``None``: none;
    the task's recipe or the library sets it) and what checks a value given in Python (:func:`check_run`; default:
    the type, where it has ``check(value, name)``)."""
    metadata = {"type": type, "flag": flag, "check": check or type}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(f: dataclasses.Field) -> str:
    """The command-line flag of a field (``batch_size`` -> ``--batch-size``; a positional argument's name)."""
    return f.metadata["flag"].name or "--" + f.name.replace("_", "-")


def flag_fields(cls: type | None = None) -> list[dataclasses.Field]:
    """The fields of the dataclass ``cls`` (default :class:`RunConfig`) that a flag sets, in the order of
    ``--help``."""
    return [f for f in dataclasses.fields(cls or RunConfig) if f.metadata.get("flag") is not None]


@dataclass
class CheckpointOptions:
    """The checkpoint a command reads: ``--checkpoint``, declared once here (eval, predict, restore, viz); a command
    changes its help or its ``nargs`` through the keywords of ``Flag`` it passes (``flags=``), not by declaring it
    again."""

    checkpoint: str = setting(None, V.path, Flag(help="checkpoint folder (or run folder: uses best)", required=True))


@dataclass
class RunConfig:
    """Every knob of the loop (:func:`pdevision.engine.loop.fit`). ``None``: the task's default, then the library's.

    ``clip_grad`` and ``ema_decay`` of 0 mean off. ``lr`` is absolute; without it the peak rate is
    ``lr_base x global batch / lr_base_batch`` (the recipe's rate at its own batch, scaled linearly).

    Each field is declared once, with :func:`setting`: its default, its value type and its flag; the command line's
    run flags (:func:`pdevision.tasks.args.add_run_arguments`), their reading back (``run_config``) and
    :func:`check_run` are made from these fields, so a new field with a :class:`Flag` is a new flag of every task.
    """

    # None: the resumed run's own folder with ``resume``, else ``runs/run``; {task_output}: the task's default
    output: str | None = setting(
        None,
        V.output_folder,
        Flag(SCHEDULE, "run folder (default {task_output}; with --resume, the resumed run's own folder)"),
    )
    epochs: int | None = setting(None, V.epochs, Flag(SCHEDULE))
    batch_size: int | None = setting(None, V.positive_int, Flag(SCHEDULE, "per process"))
    lr: float | None = setting(
        None, V.positive, Flag(SCHEDULE, "absolute; default: recipe lr x global batch / the recipe's batch")
    )
    lr_base: float | None = setting(None, V.positive)
    lr_base_batch: int | None = setting(None, V.positive_int)
    # any name of timm.optim.create_optimizer_v2: sgd, momentum, nesterov, adamw, lamb, ...
    # (checked once the task's recipe is filled in, by check_run: the message names the flag and the lister)
    opt: str | None = setting(
        None, None, Flag(SCHEDULE, "timm optimizer: sgd, momentum, nesterov, adamw, lamb, ..."), check=V.optimizer
    )
    momentum: float | None = setting(None, V.fraction, Flag(SCHEDULE, "SGD-type optimizers"))
    betas: tuple[float, float] | None = None  # None: the optimizer's default
    min_lr: float | None = setting(None, V.non_negative, Flag(SCHEDULE))
    # whole epochs on the command line; a fraction from a recipe (pretraining: a share of the epochs)
    warmup_epochs: float | None = setting(None, V.non_negative_epochs, Flag(SCHEDULE), check=V.non_negative)
    weight_decay: float | None = setting(None, V.non_negative, Flag(SCHEDULE))
    clip_grad: float | None = setting(None, V.non_negative, Flag(SCHEDULE, "gradient norm clip (0: off)"))
    ema_decay: float | None = setting(  # EMA of the weights; 0: off
        None, V.rate_below_one, Flag(SCHEDULE, "EMA of weights (0: off)", off=("--no-ema", 0.0, "turn EMA off"))
    )
    sched: str = "cosine"  # any timm scheduler name
    warmup_lr_ratio: float = 0.01  # warm-up starts at this fraction of the peak lr
    fused_opt: bool = True  # Adam, AdamW, SGD: PyTorch's fused update (one kernel for all parameters), same result
    amp: str = setting("none", None, Flag(MACHINE, "autocast (fp16: CUDA only)", choices=("none", "bf16", "fp16")))
    compile: bool = setting(False, None, Flag(MACHINE, "torch.compile the model for training"))
    # CPU: the model's modules on the oneDNN kernels (pdevision.fastpath.accelerate)
    fused_kernels: bool = setting(
        True,
        None,
        Flag(
            MACHINE,
            "CPU: the plain PyTorch modules instead of the oneDNN training kernels (e.g. second derivatives)",
            name="--no-fused-kernels",
            aliases=("--reference-kernels",),  # the flag's first name, documented before December 2026
        ),
    )
    seed: int = setting(0, V.seed, Flag(MACHINE))
    rank_seed: bool | None = None  # reseed each rank differently after the model is built (random crops, masks)
    deterministic: bool = setting(False, None, Flag(MACHINE, "deterministic algorithms (bitwise resume)"))
    workers: int = setting(0, V.workers, Flag(MACHINE, "data loader processes"))
    threads: int | None = setting(  # torch's CPU threads during the run (None: torch's own, one per core)
        None,
        V.count,
        Flag(
            MACHINE,
            "torch CPU threads (default: one per core; fewer where other jobs share the CPU, whose threads would "
            "otherwise wait on each other)",
        ),
    )
    device: str = setting("auto", V.device, Flag(MACHINE, "auto, cpu, cuda, cuda:1, ..."))
    resume: str | None = setting(None, V.path, Flag(MACHINE, "checkpoint (RUN/last) or run folder to resume"))
    # start a new run in a folder that holds one (else that is refused)
    overwrite: bool = setting(False, None, Flag(MACHINE, "start a new run in an --output that holds one"))
    # stop (as if interrupted) after this many epochs of the schedule
    stop_after_epochs: int | None = setting(None, V.epochs, Flag(MACHINE, "stop early (resume later)"))
    max_train_batches: int | None = setting(None, V.per_epoch, Flag(MACHINE, "per epoch, for smoke runs"))
    # seconds of training steps; stops early, the schedule follows it
    time_budget: float | None = setting(
        None, V.positive, Flag(MACHINE, "seconds of training (the schedule follows it)")
    )
    drop_last: bool | None = None  # None: when the train set holds at least two global batches
    find_unused_parameters: bool | None = None
    progress: bool = setting(
        True, None, Flag(MACHINE, "no progress bar (shown only on a terminal)", name="--no-progress")
    )
    # micro-batches of batch_size whose gradients are summed into one update (the global batch is N times larger)
    grad_accum_steps: int = setting(
        1, V.count, Flag(SCHEDULE, "gradient accumulation: one update per N batches (N x the batch)")
    )
    channels_last: bool = setting(False, None, Flag(MACHINE, "the model and its image batches in channels-last memory"))
    # an experiment tracker given every logged scalar (pdevision.engine.loggers); its package is imported only then
    logger: str | None = setting(
        None, None, Flag(MACHINE, "also log to wandb or mlflow (their package, imported only then)", choices=LOGGERS)
    )

    def __post_init__(self) -> None:
        if self.output is None:  # a resumed run continues in its own folder, never in a default one
            if self.resume is None:
                self.output = "runs/run"
            else:
                folder = resumed_run_folder(self.resume)
                if folder is None:
                    raise UsageError(
                        f"--resume {self.resume} is a checkpoint outside a run folder (not RUN/last): give --output, "
                        "a new or empty folder for the continued run"
                    )
                self.output = str(folder)

    def peak_lr(self, world_size: int = 1) -> float:
        """The absolute peak learning rate for ``world_size`` processes (a resolved configuration)."""
        if self.lr is not None:
            return float(self.lr)
        assert self.lr_base is not None and self.lr_base_batch is not None and self.batch_size is not None
        return self.lr_base * (self.batch_size * world_size) / self.lr_base_batch  # the global batch


def resolve_run(run: RunConfig, defaults: Mapping[str, Any] | None = None) -> RunConfig:
    """``run`` with every ``None`` filled from ``defaults`` (the task's), then :data:`RUN_DEFAULTS`; checked."""
    defaults = dict(defaults or {})
    unknown = sorted(set(defaults) - {f.name for f in dataclasses.fields(run)})
    if unknown:
        raise TypeError(f"run defaults name settings {type(run).__name__} does not have: {unknown}")
    filled = {}
    for f in dataclasses.fields(run):
        value = getattr(run, f.name)
        if value is None and f.name in defaults:
            value = defaults[f.name]
        if value is None and f.name in RUN_DEFAULTS:
            value = RUN_DEFAULTS[f.name]
        filled[f.name] = value
    out = type(run)(**filled)  # a subclass's own fields too
    check_run(out)
    return out


def check_resolved(run: RunConfig, user: str) -> None:
    """A ``ValueError`` when a setting that :func:`resolve_run` fills is still ``None`` in ``run``: ``user`` (a
    function of the loop) takes the settings as resolved, once, by :func:`~pdevision.engine.loop.fit`."""
    unset = [name for name in RUN_DEFAULTS if getattr(run, name) is None]
    if unset:
        raise ValueError(
            f"{user} takes resolved run settings (resolve_run(run, task.run_defaults())); still None: "
            + ", ".join(unset)
        )


def check_run(run: RunConfig) -> None:
    """A ``ValueError`` naming the first setting out of its range (the Python API gets the CLI's checks): each
    field's value type (:func:`setting`) checks it, the choices of its flag bound it."""
    for f in dataclasses.fields(run):
        value, kind, flag = getattr(run, f.name), f.metadata.get("check"), f.metadata.get("flag")
        if value is None:
            continue
        label = f.name.replace("_", " ") + ("" if flag is None else f" ({flag_name(f)})")
        if hasattr(kind, "check"):
            kind.check(value, label)
        if flag is not None and flag.choices is not None and value not in flag.choices:
            raise UsageError(f"{label} must be one of {', '.join(flag.choices)}, got {value!r}")


__all__ = [
    "RUN_DEFAULTS",
    "CheckpointOptions",
    "Flag",
    "RunConfig",
    "check_resolved",
    "check_run",
    "flag_fields",
    "flag_name",
    "resolve_run",
    "setting",
]
