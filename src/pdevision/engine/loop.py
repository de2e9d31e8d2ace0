"""The one fit loop: every task (classification, pretraining, restoration, ...) trains through :func:`fit`.

Linear, in the manner of torchvision's reference scripts: build the data and the model from the task, make the
run state (optimizer through timm's factory, timm's cosine schedule, AMP scaler, EMA), resume it, then for each
epoch train, evaluate, log and save. The task (:class:`pdevision.tasks.base.Task`) supplies only what differs.

Single process, or data parallel under ``torchrun`` (gloo on CPU, nccl on GPU). Rank 0 writes the run folder:
``config.json`` (the settings; timm's keys beside them where timm can rebuild the model:
:func:`pdevision.engine.hub.run_config`), ``metrics.csv`` (one row per epoch, rewritten from the history), TensorBoard
events when tensorboard is installed, ``last/`` (resumable), ``best/`` (by the task's metric, model or EMA, finite
values only) with its link ``best.safetensors`` (so that ``timm.create_model("local-dir:RUN")`` loads it), the task's
exports (``encoder/``), ``summary.json`` and ``curves.png``. A non-finite loss, weight or validation
metric stops the run with :class:`NonFiniteLossError` naming the checkpoint that is really intact; nothing
non-finite is ever saved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from pdevision._files import why_not_writable
from pdevision._optional import install_hint, installed, require
from pdevision.engine.checkpoint import (
    NO_CHECKPOINT_YET,
    CheckpointError,
    read_meta,
    resolve_checkpoint,
    resumed_run_folder,
)
from pdevision.engine.config import RunConfig, check_resolved, resolve_run
from pdevision.engine.distributed import (
    DistInfo,
    all_reduce_sum,
    cleanup_distributed,
    init_distributed,
    match_gradient_layout,
    parameters_identical_across_ranks,
)
from pdevision.engine.hub import TIMM_KINDS, hub_config, run_config
from pdevision.engine.lock import LOCK_NAME, RunLock
from pdevision.engine.loggers import RunLogger, TensorBoardLogger, check_tracker, make_logger
from pdevision.engine.resume import continued_config, recorded_config
from pdevision.engine.runtime import (
    EpochSampler,
    NonFiniteLossError,
    autocast,
    resolve_device,
    seed_everything,
    seed_host_generators,
    write_metrics,
)
from pdevision.engine.save import (
    BEST_LINK,
    NO_SPACE_ERRNOS,
    NoSpaceError,
    link_best,
    no_space_message,
    save_checkpoint,
)
from pdevision.engine.state import RunState
from pdevision.engine.task import RunContext, Task
from pdevision.errors import UsageError
from pdevision.fastpath import accelerate, fused_optimizer_supported

log = logging.getLogger(__name__)


def fit(task: Task, run: RunConfig, loggers: Sequence[RunLogger] = ()) -> dict[str, Any]:
    """Train ``task`` as ``run`` says (``None`` settings from the task's defaults, then the library's); returns the
    run summary (also in ``summary.json`` on rank 0). The settings are resolved here, once: the task
    (``task.run``, ``ctx.run``), the run state (:func:`build_state`) and ``config.json`` get the result.
    ``loggers``: experiment trackers (:class:`~pdevision.engine.loggers.RunLogger`) that rank 0 gives every
    scalar, besides the one ``run.logger`` names."""
    run = resolve_run(run, task.run_defaults())
    if run.logger is not None:  # its package: before the run, not after its first epoch
        check_tracker(run.logger)
    device = resolve_device(run.device)
    autocast(device, run.amp)  # an --amp this device cannot run fails here, before the run folder is touched
    info = init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    if info.is_main and not installed("matplotlib"):  # a run needs no plotting: curves.png only where it is
        log.warning("curves.png will not be drawn: %s", install_hint("matplotlib", "train"))
    threads = torch.get_num_threads()
    if run.threads:  # fewer than the cores where other jobs share the CPU: oversubscribed threads wait on each other
        torch.set_num_threads(run.threads)
    if run.resume and info.is_main:  # before the lock, which creates a file in the folder
        check_writable_run_folder(Path(run.output))
    try:
        with RunLock(run.output, enabled=info.is_main):
            return _fit(task, run, device, info, list(loggers))
    finally:
        torch.set_num_threads(threads)
        cleanup_distributed(info)


def held_run(run_dir: Path) -> str | None:
    """What of an earlier run ``run_dir`` holds (its checkpoints or its recipe), or ``None``."""
    held = [name for name in ("last", "best", "encoder") if (run_dir / name).is_dir()]
    held += [name for name in ("config.json", "summary.json") if (run_dir / name).is_file()]
    return ", ".join(held) or None


# what the loop writes into a run folder (a task adds its own: Task.run_files), and the save's own folders
RUN_FILES = (
    "config.json",
    BEST_LINK,
    "metrics.csv",
    "metrics.csv.tmp",
    "summary.json",
    "curves.png",
    "tensorboard",
)
_SAVE_FOLDER = re.compile(r"^(last|best|encoder|\.(last|best|encoder)\.(old|tmp-.*))$")


def _outputs_of(task: Task, name: str) -> bool:
    """Whether a run of ``task`` writes ``name`` into its run folder (replacing whatever has that name)."""
    return name in RUN_FILES or name in task.run_files or bool(_SAVE_FOLDER.match(name))


def _check_run_folder(run_dir: Path, task: Task, run: RunConfig) -> None:
    """Refuse a new run in a folder that holds another run (unless ``overwrite``) or files that are not a run's.

    Files beside a run that the loop never writes are left untouched by ``--overwrite``; in a folder without a run,
    every file is the user's: refused, unless ``--overwrite`` is given and no run file would replace one of them."""
    if run.resume:
        _check_resume_folder(run_dir, run)
        return
    if not run_dir.is_dir():
        return
    held = held_run(run_dir)
    if held:
        if not run.overwrite and resolve_or_none(run_dir) is None and (run_dir / "config.json").is_file():
            raise UsageError(f"{run_dir} {NO_CHECKPOINT_YET}")
        if not run.overwrite:  # a new run would replace that run's files one by one
            raise UsageError(
                f"{run_dir} already holds a run ({held}); continue it with --resume {run_dir}, start over in it with "
                "--overwrite, or give another --output"
            )
        return
    names = sorted(entry.name for entry in run_dir.iterdir() if entry.name != LOCK_NAME)
    clashes = [name for name in names if _outputs_of(task, name)]
    if run.overwrite and not clashes:
        return
    shown = clashes or names
    if not shown:
        return
    listed = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    if clashes:
        raise UsageError(
            f"{run_dir} holds files that are not a run's but have the names of its outputs ({listed}); a run would "
            "overwrite them: give another --output (a new or empty folder)"
        )
    raise UsageError(
        f"{run_dir} holds files that are not a run's ({listed}); give another --output (a new or empty folder), or "
        "--overwrite to write the run beside them (they are left untouched)"
    )


def resolve_or_none(run_dir: Path) -> Path | None:
    """The checkpoint ``--resume run_dir`` would continue, or ``None``."""
    try:
        return resolve_checkpoint(run_dir, prefer=("last",))
    except CheckpointError:
        return None


def _check_resume_folder(run_dir: Path, run: RunConfig) -> None:
    """A resumed run writes into its own run folder, or into a new or empty ``--output`` (a copy that continues it),
    never over another folder's files: ``--overwrite`` does not apply to a resumed run."""
    assert run.resume is not None
    own = resumed_run_folder(run.resume)
    if own is not None and own.resolve() == run_dir.resolve():
        return
    others = sorted(e.name for e in run_dir.iterdir() if e.name != LOCK_NAME) if run_dir.is_dir() else []
    if others:
        listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        where = f"its own folder {own}" if own is not None else "a new or empty --output"
        raise UsageError(
            f"--resume {run.resume} would continue into {run_dir}, which holds files ({listed}); a resumed run "
            f"writes only into {where} or a new or empty --output, never over other files"
        )


def check_writable_run_folder(run_dir: Path) -> None:
    """A ``ValueError`` when files cannot be created in the existing folder ``run_dir`` (read-only permissions,
    an immutable folder, a read-only mount): found by creating and removing a file, as the run would."""
    if not run_dir.is_dir():
        return
    why = why_not_writable(run_dir)
    if why is not None:
        raise UsageError(
            f"run folder {run_dir} cannot be written ({why}); a resumed run continues "
            "in its own folder: resume a writable copy of it, or give --output a new folder for the continued run"
        ) from None


def _fit_batch_size(train_set: Dataset, run: RunConfig, info: DistInfo) -> RunConfig:
    """``run`` with a batch no larger than a process's share of the training set, said in a warning: a larger one made
    one short batch per epoch while the learning rate was scaled by the nominal batch size (``lr_base x batch /
    lr_base_batch``); the rate follows the batch the loader really makes."""
    try:
        samples = len(train_set)  # type: ignore[arg-type]
    except TypeError:  # a stream without a length: its batches are whatever it yields
        return run
    if not isinstance(train_set, IterableDataset):  # a stream's length is already per rank
        samples = math.ceil(samples / info.world_size)
    assert run.batch_size is not None
    if samples <= 0 or run.batch_size <= samples:
        return run
    where = " per process" if info.world_size > 1 else ""
    rate = "" if run.lr is not None else " (the learning rate is scaled by that batch)"
    log.warning(
        "batch size %d is larger than the training set (%d samples%s); using batches of %d%s",
        run.batch_size,
        samples,
        where,
        samples,
        rate,
    )
    return dataclasses.replace(run, batch_size=samples)


@contextlib.contextmanager
def _writing(path: Path, state: RunState | None = None) -> Iterator[None]:
    """A write into the run folder: no room for it is a :class:`NoSpaceError` naming ``path`` (and the intact
    checkpoint), not an ``OSError`` from deep inside a writer."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_SPACE_ERRNOS:
            raise
        tail = f"; the run stopped; {state.intact(False)}" if state is not None else ""
        raise NoSpaceError(no_space_message(exc, path) + tail) from exc


def _fit(task: Task, run: RunConfig, device: torch.device, info: DistInfo, loggers: list[RunLogger]) -> dict[str, Any]:
    run_dir = Path(run.output)
    _check_run_folder(run_dir, task, run)
    assert run.batch_size is not None and run.epochs is not None  # resolved by fit
    seed_everything(run.seed, run.deterministic)
    task.run = run  # the resolved settings, before the task builds anything (ctx.run: with the batch fitted below)
    train_set, val_set = task.datasets()
    task.train_set, task.val_set = train_set, val_set
    run = _fit_batch_size(train_set, run, info)
    assert run.batch_size is not None
    recorded = _continued_settings(task, run, run_dir, epoch=0)  # a changed setting is refused before the model
    ctx = RunContext(device, info, run.amp, run.batch_size, run.workers, run_dir, task.collate_fn, run=run)
    model = task.create_model().to(device)
    if run.channels_last:  # image batches follow in ctx.to_device
        model = model.to(memory_format=torch.channels_last)
    if run.fused_kernels and device.type == "cpu":
        accelerate(model)  # float32 training: forward and gradient products on oneDNN (pdevision.fastpath)
    # The training's draws from Python's and NumPy's generators (augmentation, mixup) start from the seed, whatever
    # building the data and the model drew before: scikit-learn, imported on first use by the data sets, draws from
    # ``random`` at import, so a run's augmentations depended on whether the process had imported it already.
    seed_host_generators(run.seed)
    if run.rank_seed:
        torch.manual_seed(run.seed + 1000 * info.rank)
    loader, sampler = _train_loader(train_set, run, info, task.collate_fn)
    steps = len(loader) if run.max_train_batches is None else min(len(loader), run.max_train_batches)
    if steps == 0:
        raise UsageError(f"the training set ({len(train_set)} samples) does not fill one batch of {run.batch_size}")
    ctx.train_loader, ctx.steps_per_epoch = loader, steps
    task.prepare(model, ctx)  # before the EMA copy and the optimizer
    if info.enabled:  # the gradients' layout is DDP's bucket views' (no stride warning at the first step)
        match_gradient_layout(model)
    state = build_state(model, run, steps, info)
    if run.resume:
        state.restore(run.resume, info, task, run.epochs)
    train_model = _wrap(model, run, device, info)
    if recorded is not None:
        recorded = _continued_settings(task, run, run_dir, state.epoch)
    writer = _start_run_folder(run_dir, task, run, info, recorded, model)
    loggers = _loggers(writer, loggers, run, run_dir, task) if info.is_main else []
    stop = run.epochs if run.stop_after_epochs is None else min(run.epochs, run.stop_after_epochs)
    out_of_time = _spent(state, run, info, device) >= 1.0
    ran = 0
    while state.epoch < stop and not out_of_time:
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(state.epoch)
        logs, out_of_time = _train_epoch(task, train_model, loader, steps, state, run, ctx, loggers, ran == 0)
        if logs is None:
            break
        _end_epoch(task, model, state, logs, ctx, run, writer, loggers)
        ran += 1
    if run.resume and ran == 0 and info.is_main:
        _refresh_exports(task, model, state, run_dir)
    status = _status(state, run, out_of_time)
    return _finish(task, model, state, status, ctx, writer, len(train_set), loggers)


def _train_loader(train_set: Dataset, run: RunConfig, info: DistInfo, collate_fn: Any) -> tuple[DataLoader, Any]:
    """The training loader and the object whose ``set_epoch`` fixes an epoch's order (sampler or stream)."""
    if isinstance(train_set, IterableDataset):  # a stream splits itself across ranks and workers
        loader = DataLoader(train_set, batch_size=run.batch_size, num_workers=run.workers, collate_fn=collate_fn)
        return loader, train_set
    sampler: Any
    if info.enabled:
        sampler = DistributedSampler(train_set, info.world_size, info.rank, shuffle=True, seed=run.seed)
    else:
        sampler = EpochSampler(len(train_set), run.seed)
    drop_last = run.drop_last
    if drop_last is None:
        drop_last = len(train_set) >= run.batch_size * info.world_size * 2
    loader = DataLoader(
        train_set,
        batch_size=run.batch_size,
        sampler=sampler,
        num_workers=run.workers,
        drop_last=drop_last,
        collate_fn=collate_fn,
    )
    return loader, sampler


# timm optimizer names whose class is torch.optim.Adam, AdamW or SGD: they take ``fused=True``
FUSED_OPTS = ("adam", "adamw", "sgd", "momentum", "nesterov")


def fused_update_available(opt: str, model: nn.Module) -> bool:
    """Whether ``opt`` has PyTorch's fused update for ``model``'s trainable parameters (floating point, on the CPU
    or a CUDA device); measured against the per-parameter loop in ``benchmarks/optimizer_step/optimizer_step.md``."""
    trainable = (p for p in model.parameters() if p.requires_grad)
    return opt.lower() in FUSED_OPTS and fused_optimizer_supported(trainable)


def build_state(model: nn.Module, run: RunConfig, steps: int, info: DistInfo) -> RunState:
    """Optimizer (timm's factory: parameter groups without weight decay for norms, biases and the model's
    ``no_weight_decay()``; frozen parameters left out), timm's schedule stepped per update, scaler and EMA.

    ``run`` is resolved (:func:`~pdevision.engine.config.resolve_run`, as :func:`fit` does once); one with a setting
    still ``None`` that the resolution fills is a ``ValueError`` naming it, not a guess at the task's defaults."""
    check_resolved(run, "build_state")
    lr = run.peak_lr(info.world_size * run.grad_accum_steps)  # the global batch of one update
    kwargs: dict[str, Any] = {}
    if run.opt.lower() in ("sgd", "momentum", "nesterov", "rmsprop", "rmsproptf", "lars", "nlars"):
        kwargs["momentum"] = run.momentum
    if run.betas is not None:
        kwargs["betas"] = tuple(run.betas)
    if run.fused_opt and fused_update_available(run.opt, model):
        kwargs["fused"] = True
    optimizer = create_optimizer_v2(model, opt=run.opt, lr=lr, weight_decay=run.weight_decay, **kwargs)
    scheduler, _ = create_scheduler_v2(
        optimizer,
        sched=run.sched,
        num_epochs=run.epochs,
        warmup_epochs=run.warmup_epochs,
        min_lr=run.min_lr,
        warmup_lr=lr * run.warmup_lr_ratio,
        step_on_epochs=False,
        updates_per_epoch=math.ceil(steps / run.grad_accum_steps),
    )
    scaler = torch.amp.GradScaler("cuda", enabled=run.amp == "fp16")
    ema = ModelEmaV3(model, decay=run.ema_decay) if run.ema_decay else None
    return RunState(model, optimizer, scheduler, scaler, ema)


def _wrap(model: nn.Module, run: RunConfig, device: torch.device, info: DistInfo) -> nn.Module:
    """The module the training steps call: DDP across ranks, then ``torch.compile`` when asked."""
    train_model: nn.Module = model
    if info.enabled:
        ids = [device.index] if device.type == "cuda" else None
        train_model = DistributedDataParallel(model, device_ids=ids, find_unused_parameters=run.find_unused_parameters)
    if run.compile:  # compiled at the first step: said before, and its time after (_train_epoch)
        log.info("compiling the model with torch.compile at its first step ...")
        train_model = torch.compile(train_model)
    return train_model


def _settings(task: Task, run: RunConfig) -> dict[str, Any]:
    """What ``config.json`` records of a run: the task's name and settings, then the run's."""
    return {"task": task.name, **task.config_json(), **asdict(run)}


def _continued_settings(task: Task, run: RunConfig, run_dir: Path, epoch: int) -> dict[str, Any] | None:
    """The ``config.json`` of a resumed run (its recorded settings, a continuable change listed), or ``None`` when
    ``run`` resumes nothing or a checkpoint outside a run folder; a setting that would change the run's meaning is
    a :class:`UsageError` naming its flag."""
    if not run.resume:
        return None
    found = recorded_config(run.resume)
    if found is None:
        return None
    own = resumed_run_folder(run.resume)
    own_folder = own is not None and own.resolve() == run_dir.resolve()
    return continued_config(found[0], _settings(task, run), run.resume, own_folder, epoch)


def _loggers(writer: Any, given: list[RunLogger], run: RunConfig, run_dir: Path, task: Task) -> list[RunLogger]:
    """Rank 0's trackers: TensorBoard's per-update scalars (when it is installed), those given to :func:`fit`, and
    the one ``run.logger`` names."""
    out: list[RunLogger] = [TensorBoardLogger(writer)] if writer is not None else []
    out += given
    if run.logger is not None:
        out.append(make_logger(run.logger, run_dir, _settings(task, run)))
    return out


def _start_run_folder(
    run_dir: Path, task: Task, run: RunConfig, info: DistInfo, continued: dict[str, Any] | None, model: nn.Module
) -> Any:
    """``config.json`` (``continued``: a resumed run's, else the run's settings; with timm's keys for ``model`` where
    timm can rebuild it) and the TensorBoard writer."""
    if not info.is_main:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = continued if continued is not None else _settings(task, run)
    timm_config = hub_config(model, {**task.checkpoint_meta(), "kind": task.name}) if task.name in TIMM_KINDS else None
    config = run_config(resolved, timm_config)
    with _writing(run_dir / "config.json"):
        (run_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        log.info("tensorboard is not installed; no event files written")
        return None
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))


def _spent(state: RunState, run: RunConfig, info: DistInfo, device: torch.device) -> float:
    """Fraction of the time budget spent (mean over ranks, so every rank decides alike); 0 without a budget."""
    if run.time_budget is None:
        return 0.0
    elapsed = all_reduce_sum([state.elapsed], info, device)[0] / info.world_size
    return elapsed / run.time_budget


def _set_schedule(state: RunState, run: RunConfig, steps: int, info: DistInfo, device: torch.device) -> bool:
    """Step the schedule: by updates, or by the spent fraction of the time budget. True when time is up."""
    if run.time_budget is None:
        state.scheduler.step_update(state.num_updates)
        return False
    fraction = _spent(state, run, info, device)
    state.scheduler.step_update(int(fraction * run.epochs * steps))
    return fraction >= 1.0


def _on_terminal() -> bool:
    """Whether stderr (where tqdm draws) is a terminal: a bar's carriage-return redraws belong there; redirected to
    a file or a pipe, the one log line per epoch is the progress."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def _train_epoch(
    task: Task,
    train_model: nn.Module,
    loader: DataLoader,
    steps: int,
    state: RunState,
    run: RunConfig,
    ctx: RunContext,
    loggers: list[RunLogger],
    first_epoch: bool,
) -> tuple[dict[str, float] | None, bool]:
    """One epoch of updates (an update per ``run.grad_accum_steps`` batches); returns the epoch means of the logs
    (``None`` when no step ran) and whether the time budget ran out. ``first_epoch``: this process's first, where
    ``torch.compile`` compiles."""
    train_model.train()
    sums: dict[str, float] = {}
    seen, seconds, out_of_time = 0.0, 0.0, False
    desc = f"epoch {state.epoch + 1}/{run.epochs}"
    show = run.progress and ctx.info.is_main and _on_terminal()
    bar = tqdm(total=steps, desc=desc, disable=not show, leave=False)
    tick = time.perf_counter()
    for step, batch in enumerate(loader):
        if step >= steps:
            break
        if _set_schedule(state, run, math.ceil(steps / run.grad_accum_steps), ctx.info, ctx.device):
            out_of_time = True
            break
        batch = ctx.to_device(batch)
        first, group = _accumulation_group(step, steps, run.grad_accum_steps)
        if step == first:
            state.optimizer.zero_grad(set_to_none=True)
        applies = step == first + group - 1  # the group's last batch: the update
        compiling = time.perf_counter() if run.compile and first_epoch and step == 0 else None
        with _no_sync(train_model, not applies):
            with ctx.autocast():
                loss, logs = task.train_step(train_model, batch)
            if not torch.isfinite(loss):
                raise NonFiniteLossError(
                    f"non-finite training loss ({loss.item()}) at epoch {state.epoch + 1}, step {step + 1}; "
                    f"the run stopped; {state.intact()}"
                )
            state.scaler.scale(loss / group).backward()  # the group's mean, as one batch of group x the size
        if compiling is not None:
            log.info("compiled in %.1f s (the first step)", time.perf_counter() - compiling)
        if applies:
            _step(state, run)
            scalars = {"train/step_loss": loss.item(), "train/lr": state.optimizer.param_groups[0]["lr"]}
            for logger in loggers:
                logger.log(scalars, state.num_updates)
        n = float(_batch_len(batch))
        for key, value in {"loss": loss.item(), **logs}.items():
            sums[key] = sums.get(key, 0.0) + float(value) * n
        seen += n
        now = time.perf_counter()
        state.elapsed += now - tick
        seconds += now - tick
        tick = now
        bar.set_postfix(loss=f"{sums['loss'] / seen:.4f}", img_s=f"{seen / max(seconds, 1e-9):.0f}")
        bar.update(1)
    bar.close()
    keys = sorted(sums)
    totals = ctx.sum([seen, seconds, *(sums[k] for k in keys)])
    if totals[0] == 0:
        return None, out_of_time
    logs = {f"train_{k}": v / totals[0] for k, v in zip(keys, totals[2:], strict=True)}
    logs["train_images_per_s"] = totals[0] / max(totals[1] / ctx.info.world_size, 1e-9)
    logs["epoch_seconds"] = seconds
    return logs, out_of_time


def _accumulation_group(step: int, steps: int, accum: int) -> tuple[int, int]:
    """The first batch and the size of the group of ``accum`` batches (``--grad-accum-steps``) that batch ``step``
    of an epoch of ``steps`` adds to; an epoch's last group may be smaller."""
    first = step - step % accum
    return first, min(accum, steps - first)


def _no_sync(train_model: nn.Module, accumulating: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` while a group's gradients accumulate (its all-reduce then runs once, at the update)."""
    ddp = getattr(train_model, "_orig_mod", train_model)  # under torch.compile
    if accumulating and isinstance(ddp, DistributedDataParallel):
        return ddp.no_sync()
    return contextlib.nullcontext()


def _step(state: RunState, run: RunConfig) -> None:
    """The update from the accumulated gradients (scaled for fp16): optional gradient-norm clipping, optimizer step,
    EMA update."""
    if run.clip_grad:
        state.scaler.unscale_(state.optimizer)
        torch.nn.utils.clip_grad_norm_(state.model.parameters(), run.clip_grad)
    state.scaler.step(state.optimizer)
    state.scaler.update()
    state.num_updates += 1
    if state.ema is not None:
        state.ema.update(state.model, step=state.num_updates)


def _batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else []
    for item in items:
        n = _batch_len(item)
        if n:
            return n
    return 0


def _end_epoch(
    task: Task,
    model: nn.Module,
    state: RunState,
    logs: dict[str, float],
    ctx: RunContext,
    run: RunConfig,
    writer: Any,
    loggers: list[RunLogger],
) -> None:
    """Validate (model and EMA), append the row, log it, check it is finite, save ``last/`` and ``best/``."""
    state.epoch += 1
    val = {f"val_{k}": v for k, v in task.evaluate(model, ctx).items()} if task.val_set is not None else {}
    if state.ema is not None and task.val_set is not None:
        val.update({f"val_{k}_ema": v for k, v in task.evaluate(state.ema.module, ctx).items()})
    seconds = logs.pop("epoch_seconds")
    row = {"epoch": state.epoch, "steps": state.num_updates, "lr": state.optimizer.param_groups[0]["lr"], **logs}
    row.update({**val, "epoch_seconds": seconds, "seconds": state.elapsed})
    state.check_finite({**logs, **val})
    state.history.append(row)
    (log.info if ctx.info.is_main else log.debug)("epoch %d/%d  %s", state.epoch, run.epochs, task.epoch_log(row))
    best_module, score = _best(task, model, state, row)
    meta = {**task.checkpoint_meta(), "kind": task.name}
    if score is not None:
        meta[f"val_{task.best_metric}"] = score
    if ctx.info.is_main:
        with _writing(ctx.run_dir / "metrics.csv", state):
            write_metrics(ctx.run_dir / "metrics.csv", state.history)
        if writer is not None:
            for key, value in row.items():
                if key != "epoch" and isinstance(value, (int, float)):
                    writer.add_scalar(key, value, state.epoch)
            writer.flush()
        scalars = {f"epoch/{k}": float(v) for k, v in row.items() if isinstance(v, (int, float))}
        for logger in loggers:
            if not isinstance(logger, TensorBoardLogger):  # the writer above has the rows
                logger.log(scalars, state.num_updates)
    with task.saving(model, state.ema_module):
        extra = task.extra_state()
        exports = task.exports(model) if ctx.info.is_main else {}
        state.save(ctx.run_dir, meta, extra, ctx.info, best_module, exports)
    if ctx.info.is_main and best_module is not None and (ctx.run_dir / "best" / "config.json").is_file():
        link_best(ctx.run_dir)  # timm's local-dir:RUN (RUN/config.json holds timm's keys)


def _best(task: Task, model: nn.Module, state: RunState, row: dict[str, Any]) -> tuple[nn.Module | None, float | None]:
    """The module to save as ``best/`` when this epoch improves the task's (finite) metric, and the score."""
    if task.best_metric is None or f"val_{task.best_metric}" not in row:
        return None, None
    sign = 1.0 if task.higher_is_better else -1.0
    candidates = [(row[f"val_{task.best_metric}"], model)]
    if state.ema is not None and row.get(f"val_{task.best_metric}_ema") is not None:
        candidates.append((row[f"val_{task.best_metric}_ema"], state.ema.module))
    candidates = [(v, m) for v, m in candidates if math.isfinite(v)]
    if not candidates:
        return None, None
    score, module = max(candidates, key=lambda c: sign * c[0])
    if state.best is not None and sign * score <= sign * state.best:
        return None, score
    state.best = score
    state.best_row = dict(row)
    return module, score


def _refresh_exports(task: Task, model: nn.Module, state: RunState, run_dir: Path) -> None:
    """A resumed run with nothing left to train: rewrite any export older than ``last/`` (a run killed while
    exporting would otherwise report completion next to a stale export)."""
    for name, (module, meta) in task.exports(model).items():
        try:
            current = read_meta(run_dir / name).get("epoch") == state.epoch
        except CheckpointError:
            current = False
        if not current:
            log.info("rewriting the stale export %s", run_dir / name)
            save_checkpoint(run_dir, name, module, {**meta, "epoch": state.epoch})


def _status(state: RunState, run: RunConfig, out_of_time: bool) -> str:
    if out_of_time:
        return f"time budget of {run.time_budget:.0f} s spent"
    if state.epoch < run.epochs:
        return f"stopped after epoch {state.epoch} of {run.epochs}"
    return "completed"


def _finish(
    task: Task,
    model: nn.Module,
    state: RunState,
    status: str,
    ctx: RunContext,
    writer: Any,
    train_len: int,
    loggers: list[RunLogger],
) -> dict[str, Any]:
    """``summary.json``, curves and the task's final artefacts (rank 0); returns the summary."""
    info = ctx.info
    summary = {
        "status": status,
        "epochs_run": len(state.history),
        "steps": state.num_updates,
        "images_seen": state.num_updates * ctx.batch_size * info.world_size * ctx.run.grad_accum_steps
        if ctx.run is not None
        else None,
        "seconds": state.elapsed,
        "best_metric": task.best_metric,
        "best": state.best,
        "best_row": state.best_row,
        "final": state.history[-1] if state.history else None,
        "world_size": info.world_size,
        "ranks_identical": parameters_identical_across_ranks(model, info, ctx.device),
        "train_samples": train_len,
    }
    summary.update(task.summary(summary))
    if info.is_main:
        with _writing(ctx.run_dir / "summary.json", state):
            (ctx.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        if state.history and installed("matplotlib"):
            with _writing(ctx.run_dir / "curves.png", state):
                _plot_curves(state.history, task.best_metric, ctx.run_dir / "curves.png")
        if state.history:
            with _writing(ctx.run_dir, state):
                task.finish(model, ctx.run_dir)
        for logger in loggers:
            logger.close()
        if writer is not None:
            writer.close()
    return summary


def _plot_curves(history: list[dict[str, Any]], metric: str | None, path: Path) -> None:
    """Loss (train and val) and the task's metric (val, val EMA, train where logged) per epoch."""
    matplotlib = require("matplotlib", "train")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [h["epoch"] for h in history]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    panels = [
        ("loss", ["train_loss", "val_loss"]),
        (metric or "", [f"train_{metric}", f"val_{metric}", f"val_{metric}_ema"]),
    ]
    for ax, (title, keys) in zip(axes, panels, strict=True):
        for key in keys:
            if any(h.get(key) is not None for h in history):
                ax.plot(epochs, [h.get(key) for h in history], marker="o", label=key)
        ax.set(xlabel="epoch", ylabel=title, title=title)
        if len(epochs) <= 10:  # epochs are whole numbers: each one, or as many whole numbers as fit
            ax.set_xticks(epochs)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.lines:
            ax.legend(fontsize=9)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


__all__ = ["RUN_FILES", "RunConfig", "RunContext", "fit", "held_run"]
