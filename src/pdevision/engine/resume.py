"""What a resumed run keeps of its recorded settings: ``--resume RUN`` continues the run as ``RUN/config.json``
records it.

A run's settings are of three kinds. Those of one invocation (:data:`INVOCATION`: where it runs, how many
processes load data, whether a bar is drawn, where it stops early) are the command's own and never restored. Those
that name where the run's weights came from (:data:`ORIGIN`) are the run's history: a resumed run's weights come from
its checkpoint, so they are neither restored nor given again. Every other setting is the run's meaning: restored
where the command does not give it (:func:`restorable_settings`), refused in one line where the command gives
another value (:func:`continued_config`), except those that a continued run may change (:data:`CONTINUABLE`: more
epochs), which ``config.json`` records in its ``resumed`` list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pdevision._files import not_a_regular_file
from pdevision.engine.checkpoint import CheckpointError, resumed_run_folder
from pdevision.engine.hub import run_settings
from pdevision.engine.metadata import MetadataError, parse_json
from pdevision.errors import UsageError

# settings of one invocation of a run, not of the run: a resumed run takes them from its own command line
INVOCATION = frozenset(
    {"output", "overwrite", "stop_after_epochs", "progress", "device", "workers", "threads", "compile"}
)
# where the run's starting weights came from: kept as recorded (a resumed run's weights are its checkpoint's)
ORIGIN = frozenset({"resume", "init_from", "pretrained"})
# settings a continued run may change (its schedule from here on); each change is recorded in config.json's
# "resumed" list
CONTINUABLE = frozenset({"epochs", "warmup_epochs"})  # a recipe derives warm-up from the epochs
# keys config.json holds beside the settings
HISTORY = "resumed"
# what the loop writes into every run folder beside config.json: a folder holding one is a run whose settings count
RUN_RECORDS = ("metrics.csv", "summary.json")


def recorded_config(resume: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The settings a run records (``RUN/config.json`` of the run folder that ``resume`` continues, without timm's
    keys: :func:`~pdevision.engine.hub.run_settings`) and that file, or ``None`` for a checkpoint outside a run folder
    (or in a folder of checkpoints that holds no record of a run); a :class:`UsageError` where a run's file is
    missing, is not a regular file or cannot be read (the run would go on with settings it never had)."""
    try:
        folder = resumed_run_folder(resume)
    except CheckpointError:
        return None  # the resume itself reports it
    if folder is None:
        return None
    path = folder / "config.json"
    missing = not (path.exists() or path.is_symlink())
    if missing and not any((folder / name).is_file() for name in RUN_RECORDS):
        return None  # checkpoints saved by hand (save_checkpoint), not a run of the loop: the flags say it all
    if not path.is_file() or not_a_regular_file(path) is not None:  # the run's settings are unknown: never guessed
        what = "missing" if missing else f"{not_a_regular_file(path) or 'not a file'}"
        raise UsageError(
            f"--resume {resume}: the run's settings {path} are {what}; a resumed run continues as its config.json "
            "records it: put the run's config.json back, or start a new run"
        )
    try:
        values = parse_json(path.read_text(encoding="utf-8", errors="replace"))
    except (MetadataError, OSError) as exc:
        raise UsageError(f"--resume {resume}: the run's settings {path} cannot be read ({exc})") from None
    if not isinstance(values, dict):
        raise UsageError(f"--resume {resume}: the run's settings {path} are not a mapping")
    history = values.get(HISTORY, [])
    if not (isinstance(history, list) and all(_is_change(item) for item in history)):
        raise UsageError(
            f"--resume {resume}: the run's settings {path} hold a {HISTORY!r} that is not a list of changes "
            f'(each {{"after_epoch": N, SETTING: [BEFORE, AFTER]}}), got {history!r:.80}'
        )
    return run_settings(values), path


def _is_change(item: Any) -> bool:
    """Whether ``item`` is one entry of ``config.json``'s ``resumed`` list, as :func:`continued_config` writes it."""
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("after_epoch"), int)
        or isinstance(item["after_epoch"], bool)
    ):
        return False
    return all(isinstance(v, list) and len(v) == 2 for k, v in item.items() if k != "after_epoch")


def restorable_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded settings that a resumed run takes where its command does not give them: all but the
    invocation's, the origin's and the history."""
    out = {}
    for key, value in recorded.items():
        if key in INVOCATION | ORIGIN | {HISTORY}:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 0.0 warm-up epochs: the flag takes whole numbers, and a float flag reads "0" too
        elif isinstance(value, float) and key == "warmup_epochs":
            continue  # a recipe's share of the epochs, which no flag gives: the recipe derives it again
        out[key] = value
    return out


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def continued_config(
    recorded: dict[str, Any], current: dict[str, Any], resume: str | Path, own_folder: bool, epoch: int
) -> dict[str, Any]:
    """The ``config.json`` of a run resumed after ``epoch`` with the settings ``current`` (as a fresh run would
    record them), from the ``recorded`` ones; a :class:`UsageError` naming the first setting whose value would
    change the run's meaning. ``own_folder``: the run continues in its own folder (else a copy continues it in a
    new one, whose origin is ``resume``)."""
    changed = {}
    for key, value in current.items():
        if key in INVOCATION or key in ORIGIN or key not in recorded:
            continue
        was, now = _plain(recorded[key]), _plain(value)
        if was == now:
            continue
        if key in CONTINUABLE:
            changed[key] = [was, now]
            continue
        raise UsageError(
            f"--resume {resume}: {_flag(key)} {_shown(now)} differs from the run's {_shown(was)} "
            f"(recorded in its config.json); a resumed run keeps its settings (it may take more --epochs): leave "
            f"{_flag(key)} out, or start a new run"
        )
    out = _plain(current)
    if own_folder:  # (its output is where the folder is now: a run folder may have been moved)
        for key in ORIGIN:
            if key in recorded:
                out[key] = recorded[key]
    history = list(recorded.get(HISTORY, []))
    if changed:
        history.append({"after_epoch": epoch, **changed})
    if history:
        out[HISTORY] = history
    return out


def recorded_data(folder: str | Path, task: str) -> tuple[str, float] | None:
    """The data and validation fraction that the ``task`` run which wrote the checkpoint ``folder`` (``RUN/best``,
    ``RUN/last``) trained on, as its ``RUN/config.json`` records them (a checkpoint's own metadata names embedded
    sets only, never a path), or ``None``: not a run's checkpoint, another task's, or no data recorded."""
    folder = Path(folder)
    path = folder.parent / "config.json"
    if folder.name not in ("best", "last", ".last.old") or not path.is_file():
        return None
    try:
        values = parse_json(path.read_text(encoding="utf-8", errors="replace"))
    except (MetadataError, OSError):
        return None
    if not isinstance(values, dict) or values.get("task") != task or not isinstance(values.get("data"), str):
        return None
    split = values.get("val_split")
    return values["data"], float(split) if isinstance(split, int | float) and 0 < split < 1 else 0.2


__all__ = [
    "CONTINUABLE",
    "HISTORY",
    "INVOCATION",
    "ORIGIN",
    "continued_config",
    "recorded_config",
    "recorded_data",
    "restorable_settings",
]
