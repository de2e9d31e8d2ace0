"""Command-line arguments the tasks declare: value types with one-line errors, and the run settings every task
shares (:func:`add_run_arguments` -> :func:`run_config`). The ``pdevision`` command (:mod:`pdevision.cli`) builds its
parsers from these and from each task's own declaration (:mod:`pdevision.tasks.registry`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pdevision.engine import validators as V
from pdevision.engine.config import RunConfig
from pdevision.errors import UsageError


def write_new_file(path: str | Path, text: str) -> None:
    """Write ``text`` into a file that must not exist yet (created exclusively: one made meanwhile is not replaced)."""
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{path} exists (it is not overwritten; name a new file)") from None


# RunConfig field -> the flags that set it (the same for every task)
RUN_FLAGS = (
    "--output",
    "--epochs",
    "--batch-size",
    "--lr",
    "--opt",
    "--momentum",
    "--min-lr",
    "--warmup-epochs",
    "--weight-decay",
    "--clip-grad",
    "--ema-decay",
    "--no-ema",
    "--amp",
    "--compile",
    "--reference-kernels",
    "--seed",
    "--deterministic",
    "--workers",
    "--threads",
    "--device",
    "--resume",
    "--overwrite",
    "--stop-after-epochs",
    "--max-train-batches",
    "--time-budget",
    "--no-progress",
)


def add_run_arguments(
    p: argparse.ArgumentParser, output: str, skip: Iterable[str] = (), defaults: dict[str, Any] | None = None
) -> None:
    """The run settings (:class:`RunConfig`) as flags, but those in ``skip``; ``None`` defaults mean "the task's".
    ``defaults``: help text for the task's defaults (flag -> value)."""
    skip, shown = set(skip), dict(defaults or {})

    def add(group: argparse._ArgumentGroup, flag: str, **kw: Any) -> None:
        if flag in skip:
            return
        if flag in shown:
            kw["help"] = f"{kw.get('help', '')} (default {shown[flag]})".strip()
        group.add_argument(flag, **kw)

    g = p.add_argument_group("run: schedule and optimiser (default: the task's recipe)")
    add(
        g,
        "--output",
        type=V.output_folder,
        default=None,
        help=f"run folder (default {output}; with --resume, the resumed run's own folder)",
    )
    p.set_defaults(default_output=output)
    add(g, "--epochs", type=V.epochs, default=None)
    add(g, "--batch-size", type=V.positive_int, default=None, help="per process")
    add(
        g,
        "--lr",
        type=V.positive,
        default=None,
        help="absolute; default: recipe lr x global batch / the recipe's batch",
    )
    add(g, "--opt", default=None, help="timm optimizer: sgd, momentum, nesterov, adamw, lamb, ...")
    add(g, "--momentum", type=V.fraction, default=None, help="SGD-type optimizers")
    add(g, "--min-lr", type=V.non_negative, default=None)
    add(g, "--warmup-epochs", type=V.non_negative_epochs, default=None)
    add(g, "--weight-decay", type=V.non_negative, default=None)
    add(g, "--clip-grad", type=V.non_negative, default=None, help="gradient norm clip (0: off)")
    add(g, "--ema-decay", type=V.rate_below_one, default=None, help="EMA of weights (0: off)")
    add(g, "--no-ema", action="store_true", help="turn EMA off")
    g = p.add_argument_group("run: precision, devices, resume, stopping")
    add(g, "--amp", default="none", choices=["none", "bf16", "fp16"], help="autocast (fp16: CUDA only)")
    add(g, "--compile", action="store_true", help="torch.compile the model for training")
    add(
        g,
        "--reference-kernels",
        dest="fused_kernels",
        action="store_false",
        help="CPU: the plain PyTorch modules instead of the oneDNN training kernels (e.g. second derivatives)",
    )
    add(g, "--seed", type=V.seed, default=0)
    add(g, "--deterministic", action="store_true", help="deterministic algorithms (bitwise resume)")
    add(g, "--workers", type=V.workers, default=0, help="data loader processes")
    add(
        g,
        "--threads",
        type=V.count,
        default=None,
        help="torch CPU threads (default: one per core; fewer where other jobs share the CPU, whose threads would "
        "otherwise wait on each other)",
    )
    add(g, "--device", type=V.device, default="auto", help="auto, cpu, cuda, cuda:1, ...")
    add(g, "--resume", type=V.path, default=None, help="checkpoint (RUN/last) or run folder to resume")
    add(g, "--overwrite", action="store_true", help="start a new run in an --output that holds one")
    add(g, "--stop-after-epochs", type=V.epochs, default=None, help="stop early (resume later)")
    add(g, "--max-train-batches", type=V.per_epoch, default=None, help="per epoch, for smoke runs")
    add(g, "--time-budget", type=V.positive, default=None, help="seconds of training (the schedule follows it)")
    add(g, "--no-progress", dest="progress", action="store_false", help="no progress bar (shown only on a terminal)")


def run_config(args: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of parsed run flags (those a task skipped keep their defaults)."""
    ema = 0.0 if getattr(args, "no_ema", False) else getattr(args, "ema_decay", None)
    keys = (
        "output",
        "epochs",
        "batch_size",
        "lr",
        "opt",
        "momentum",
        "min_lr",
        "warmup_epochs",
        "weight_decay",
        "clip_grad",
        "amp",
        "compile",
        "fused_kernels",
        "seed",
        "deterministic",
        "workers",
        "threads",
        "device",
        "resume",
        "overwrite",
        "stop_after_epochs",
        "max_train_batches",
        "time_budget",
        "progress",
    )
    values = {k: getattr(args, k) for k in keys if hasattr(args, k)}
    if values.get("resume") and getattr(args, "init_from", None):  # the resumed weights would replace them
        raise UsageError(
            f"--init-from {args.init_from} and --resume {values['resume']} both give the starting weights: --resume "
            "continues a run with its own weights, --init-from starts a new one (give one of them)"
        )
    if values.get("resume") and values.get("overwrite"):
        raise UsageError(
            f"--overwrite starts a new run, --resume {values['resume']} continues one in its own folder "
            "(give one of them)"
        )
    if values.get("output") is None and not values.get("resume"):
        values["output"] = getattr(args, "default_output", None)
    return RunConfig(**values, ema_decay=ema)


def task_fields(args: argparse.Namespace, cls: type, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The parsed flags named like fields of the dataclass ``cls`` (its ``run`` and ``skip`` left out)."""
    names = set(cls.__dataclass_fields__) - {"run", *skip}
    return {k: v for k, v in vars(args).items() if k in names}


def is_rank0() -> bool:
    """Whether this process prints the summary (rank 0 under ``torchrun``, or a single process)."""
    return os.environ.get("RANK", "0") == "0"
