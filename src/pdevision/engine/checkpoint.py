"""Checkpoints: a folder per checkpoint, written atomically, safe under repeated faults.

Layout of ``<run>/<name>/`` (``name`` is ``last``, ``best`` or ``encoder``):

* ``model.safetensors``: model weights; metadata holds the model name, class names and the
  model arguments needed to rebuild it (JSON strings).
* ``ema.safetensors``: EMA weights, when EMA is on.
* ``config.json``: timm's model config (architecture, classes, pretrained cfg) for backbone checkpoints, so that
  ``timm.create_model("local-dir:RUN/best")`` loads the folder (:mod:`pdevision.engine.hub`).
* ``trainer.pt``: optimizer, scheduler, scaler, epoch, sampler position and RNG states, read back
  with ``torch.load(weights_only=True)``.

Save protocol (:func:`save_checkpoint`), with ``final = <run>/<name>`` and ``old = <run>/.<name>.old``:

0. recover: if ``final`` is missing and ``old`` is complete (a save was interrupted between its two
   renames), rename ``old`` back to ``final``; remove temporary folders of dead writers;
1. write every file into ``<run>/.<name>.tmp-<pid>-<random>``, flush and fsync each file and the folder;
2. if ``final`` exists (complete): delete ``old`` (redundant), rename ``final`` to ``old``;
3. rename the temporary folder to ``final``, fsync the run folder;
4. delete ``old``.

``final`` only ever appears by a rename of a complete folder, and ``old`` is deleted only while a
complete ``final`` exists, so a fault at any step (and another fault after the recovery) leaves a
complete checkpoint: ``final``, or ``old`` when the fault hit between the renames, which
:func:`resolve_checkpoint` then returns. ``tests/engine/test_checkpoint_refusals.py`` injects a fault
at every step, twice in a row. Folders and files follow the umask.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import pickletools
import re
import secrets
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from safetensors import safe_open
from torch import nn

from pdevision._files import not_a_regular_file
from pdevision._values import is_finite_number
from pdevision.engine.hub import HUB_CONFIG, hub_config_bytes
from pdevision.engine.metadata import MAX_METADATA_BYTES, MetadataError, parse_json
from pdevision.engine.runtime import one_line


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the model."""


class NoSpaceError(RuntimeError):
    """A write failed for want of space (a full disk, a quota, a file-size limit); nothing was half-written."""


# errors of a write that mean "no room for this file": a full disk, a quota, a file-size limit (RLIMIT_FSIZE)
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_space_message(exc: OSError, what: str | Path) -> str:
    """One line for a write of ``what`` that failed with one of :data:`NO_SPACE_ERRNOS`."""
    why = {errno.EFBIG: " (a file reached the file-size limit)", errno.EDQUOT: " (disk quota exceeded)"}
    return f"no space left on device while writing {what}{why.get(exc.errno or 0, '')}"


CHECKPOINT_NAMES = ("last", "best", "encoder")
# the temporary and previous folders of a save (see the module docstring)
_SIBLING = re.compile(r"^\.(last|best|encoder)\.(old|tmp-.*)$")


def checkpoint_folder_of(path: str | Path) -> Path | None:
    """The checkpoint folder that ``path`` is or lies inside, or ``None``: a folder holding ``model.safetensors``,
    a save's temporary or previous folder (``RUN/.best.old``, ``RUN/.last.tmp-*``), or ``RUN/last``, ``RUN/best`` or
    ``RUN/encoder`` of a run folder. The next save of that checkpoint replaces the folder whole, deleting whatever
    a command wrote there."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        if _SIBLING.match(folder.name) or (folder / "model.safetensors").is_file():
            return folder
        parent = folder.parent
        if folder.name in CHECKPOINT_NAMES and (
            (parent / "config.json").is_file() or (parent / "summary.json").is_file()
        ):
            return folder
    return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _state_dict_for_save(module: nn.Module) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage; clone to contiguous, standalone tensors
    return {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}


def _write_bytes(path: Path, data: bytes) -> None:
    """Write, flush and fsync ``path`` (created with the umask's permissions, as ``open`` does)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return False
    return True


def _stale_temp(folder: Path) -> bool:
    """A temporary folder whose writer (the PID in its name) is no longer running, or is this process
    (an earlier save of this process that failed: one process writes one checkpoint name at a time)."""
    parts = folder.name.rsplit(".tmp-", 1)[-1].split("-")
    try:
        pid = int(parts[0])
    except ValueError:
        return True  # not written by this protocol's naming: left over
    return pid == os.getpid() or not _pid_alive(pid)


def _complete(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file()


def recover_checkpoint(run_dir: Path, name: str) -> None:
    """Undo an interrupted save of ``run_dir/name``: bring ``.<name>.old`` back when ``name`` is missing,
    remove temporary folders of writers that no longer run."""
    final, old = run_dir / name, run_dir / f".{name}.old"
    if not final.exists() and _complete(old):
        os.replace(old, final)
        _fsync_dir(run_dir)
    for stale in run_dir.glob(f".{name}.tmp-*"):
        if _stale_temp(stale):
            shutil.rmtree(stale, ignore_errors=True)


def save_checkpoint(
    run_dir: Path,
    name: str,
    model: nn.Module,
    meta: dict[str, Any],
    trainer_state: dict[str, Any] | None = None,
    ema: nn.Module | None = None,
) -> Path:
    """Write ``run_dir/name`` atomically and return its path. ``meta`` values must be JSON-serialisable.

    A write that fails for want of space raises :class:`NoSpaceError` naming the checkpoint; the previous
    checkpoint of that name stays as it was."""
    run_dir = Path(run_dir)
    try:
        return _save_checkpoint(run_dir, name, model, meta, trainer_state, ema)
    except OSError as exc:
        if exc.errno in NO_SPACE_ERRNOS:
            raise NoSpaceError(no_space_message(exc, f"the checkpoint {run_dir / name}")) from exc
        raise


def _save_checkpoint(
    run_dir: Path,
    name: str,
    model: nn.Module,
    meta: dict[str, Any],
    trainer_state: dict[str, Any] | None,
    ema: nn.Module | None,
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    final, old = run_dir / name, run_dir / f".{name}.old"
    recover_checkpoint(run_dir, name)
    metadata = {k: json.dumps(v) for k, v in meta.items()}
    tmp = run_dir / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(tmp)  # not tempfile.mkdtemp: that forces 0700 whatever the umask
    try:
        weights = safetensors.torch.save(_state_dict_for_save(model), metadata=metadata)
        _write_bytes(tmp / "model.safetensors", weights)
        del weights
        hub = hub_config_bytes(model, meta)  # timm's config.json: the folder is also a timm / Hugging Face folder
        if hub is not None:
            _write_bytes(tmp / HUB_CONFIG, hub)
        if ema is not None:
            _write_bytes(tmp / "ema.safetensors", safetensors.torch.save(_state_dict_for_save(ema), metadata=metadata))
        if trainer_state is not None:
            # serialised in memory first: torch's writer reports a failed write (a full disk) as an internal
            # "enforce fail at inline_container.cc", where a plain write raises the OSError that says why
            buffer = io.BytesIO()
            torch.save(trainer_state, buffer)
            _write_bytes(tmp / "trainer.pt", buffer.getvalue())
            del buffer
        _fsync_dir(tmp)
        if final.exists():
            if old.exists():
                shutil.rmtree(old)  # redundant: final is complete
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old.exists():
        shutil.rmtree(old)
    return final


def resolve_checkpoint(path: str | Path, prefer: tuple[str, ...] = ("best", "last")) -> Path:
    """The checkpoint folder for ``path``: a folder, its ``model.safetensors``, or a run folder (the
    first of ``prefer`` present: ``best`` then ``last`` to evaluate, ``last`` alone to resume); falls
    back to ``.<name>.old`` after an interrupted swap."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".safetensors"):
        path = path.parent
    if path.is_dir() and not (path / "model.safetensors").exists():
        for name in prefer:
            for folder in (path / name, path / f".{name}.old"):
                if (folder / "model.safetensors").exists():
                    return folder
    if not (path / "model.safetensors").exists():
        old = path.parent / f".{path.name}.old"
        if (old / "model.safetensors").exists():
            return old
        raise CheckpointError(f"no checkpoint at {path} (expected a folder with model.safetensors)")
    return path


def resumed_run_folder(path: str | Path) -> Path | None:
    """The run folder a ``--resume`` path continues: the folder holding the ``last/`` checkpoint that ``path``
    resolves to (``RUN``, ``RUN/last`` or ``RUN/.last.old``), or ``None`` for a checkpoint folder of another name,
    which belongs to no run. A run folder with a recipe but no checkpoint (a run stopped before its first save) is
    a :class:`CheckpointError` that says there is nothing to resume, as a new run into it says."""
    path = Path(path)
    try:
        folder = resolve_checkpoint(path, prefer=("last",))
    except CheckpointError:
        if path.is_dir() and (path / "config.json").is_file():
            raise CheckpointError(f"{path} {NO_CHECKPOINT_YET}") from None
        raise
    return folder.parent if folder.name in ("last", ".last.old") else None


# a run folder with a recipe but no checkpoint: what `train --output` and `--resume` both say of it
NO_CHECKPOINT_YET = (
    "holds a run that stopped before its first checkpoint (config.json, no last/): there is nothing to resume; "
    "start over in it with --overwrite, or give another --output"
)


def regular_checkpoint_file(file: Path) -> Path:
    """``file``; a :class:`CheckpointError` if it is a FIFO, device or folder (reading one would block forever)."""
    what = not_a_regular_file(file)
    if what is not None:
        raise CheckpointError(f"checkpoint file {file} is {what}, not a regular file")
    return file


def read_meta(path: str | Path) -> dict[str, Any]:
    """The metadata stored with a checkpoint's weights (model name, classes, arguments, epoch)."""
    folder = resolve_checkpoint(path)
    file = regular_checkpoint_file(folder / "model.safetensors")
    try:
        with safe_open(str(file), framework="pt") as f:
            raw = f.metadata() or {}
    except Exception as exc:  # safetensors raises its own error type for truncated or garbage files
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from exc
    meta = parse_checkpoint_metadata(raw, file)
    classes = meta.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise CheckpointError(f"checkpoint file {file}: its classes must be a list of names, got {classes!r:.80}")
    if "kind" in meta and not isinstance(meta["kind"], str):
        raise CheckpointError(f"checkpoint file {file}: its kind must be a task name, got {meta['kind']!r:.80}")
    check_normalisation(meta, file)
    if meta.get("kind") in ("segment", "detect") and not isinstance(meta.get("head"), str):
        raise CheckpointError(f"checkpoint file {file} is a {meta['kind']} checkpoint without its head in the metadata")
    return meta


def parse_checkpoint_metadata(raw: dict[str, str], file: str | Path) -> dict[str, Any]:
    """The values of a safetensors header's metadata, each parsed as JSON by the one bounded reader
    (:func:`pdevision.engine.metadata.parse_json`: at most :data:`MAX_METADATA_BYTES` in all, nested at most
    :data:`MAX_JSON_DEPTH` deep); anything else is a :class:`CheckpointError` naming ``file``."""
    total = sum(len(k) + len(v) for k, v in raw.items())
    if total > MAX_METADATA_BYTES:
        raise CheckpointError(
            f"checkpoint file {file} has {total:,} characters of metadata, above the limit of {MAX_METADATA_BYTES:,}"
        )
    meta = {}
    for key, value in raw.items():
        try:
            meta[key] = parse_json(value)
        except MetadataError as exc:
            raise CheckpointError(f"checkpoint file {file} has {key!r:.40} {exc}") from None
    return meta


def check_normalisation(meta: dict[str, Any], file: str | Path) -> None:
    """A :class:`CheckpointError` unless the metadata's ``mean`` and ``std`` (where present) are lists of finite
    numbers, one per input channel (or one for all), with every ``std`` above zero."""
    args = meta.get("model_args")
    chans = args.get("in_chans") if isinstance(args, dict) and "in_chans" in args else meta.get("in_chans", 3)
    for name in ("mean", "std"):
        if name not in meta:
            continue
        value = meta[name]
        ok = (
            isinstance(value, list)
            and len(value) in (1, chans)
            and all(is_finite_number(v) for v in value)
            and (name == "mean" or all(v > 1e-6 for v in value))
        )
        if not ok:
            raise CheckpointError(
                f"checkpoint file {file}: its {name} must be a list of {chans} finite numbers"
                + (" above zero" if name == "std" else "")
                + f", got {value!r:.80}"
            )


def check_finite_weights(state: dict[str, torch.Tensor], folder: str | Path) -> None:
    """A :class:`CheckpointError` naming the first tensor with a NaN or infinite value."""
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"checkpoint {folder} holds non-finite weights (first: {key}); refused")


def default_eval_output(folder: str | Path) -> Path:
    """Where evaluation results of the checkpoint ``folder`` go by default: beside it, never inside it (the next
    save of ``RUN/best/`` replaces that folder whole): ``RUN/eval-best/`` for ``RUN/best/``."""
    folder = Path(folder)
    name = folder.name
    if name.startswith(".") and name.endswith(".old"):  # the fallback of an interrupted save
        name = name[1:-4]
    return folder.parent / f"eval-{name}"


# kinds of checkpoints written before every checkpoint named its task: restoration runs wrote "restoration" and
# their task under "task"; classification runs wrote no kind
def checkpoint_kind(meta: dict[str, Any]) -> str | None:
    """The task a checkpoint belongs to (its ``kind``; ``encoder`` for a pretraining export), or ``None``."""
    kind = meta.get("kind")
    if kind == "restoration":
        return meta.get("task") if isinstance(meta.get("task"), str) else None
    if kind is None and meta.get("classes") is not None:
        return "classify"
    return kind if isinstance(kind, str) else None


def load_weights(path: str | Path, ema: bool = False) -> dict[str, torch.Tensor]:
    """Weights of a checkpoint folder (the EMA copy with ``ema=True`` where present)."""
    folder = resolve_checkpoint(path)
    file = folder / ("ema.safetensors" if ema and (folder / "ema.safetensors").exists() else "model.safetensors")
    regular_checkpoint_file(file)
    try:
        return safetensors.torch.load_file(str(file))
    except Exception as exc:
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from exc


def _is_pickle(file: Path) -> bool:
    """Whether ``file`` parses as a pickle stream (its opcodes read, never executed)."""
    try:
        with open(file, "rb") as f:
            ops = list(pickletools.genops(io.BytesIO(f.read(1 << 26))))
    except Exception:  # not a pickle: pickletools raises ValueError, struct.error, ... on bad opcodes
        return False
    return bool(ops) and ops[-1][0].name == "STOP"


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Trainer state (optimizer, scheduler, RNG, epoch), read with ``weights_only=True``."""
    folder = resolve_checkpoint(path)
    file = folder / "trainer.pt"
    if not file.exists():
        raise CheckpointError(f"checkpoint {folder} has no trainer state (trainer.pt); it cannot be resumed")
    regular_checkpoint_file(file)
    # torch.save writes a zip archive; anything else (a raw pickle, which may carry code) is refused unread, before
    # torch's fallback to its legacy format, which warns on stderr and then fails on the pickle's first opcode
    if not zipfile.is_zipfile(file):
        if _is_pickle(file):
            raise CheckpointError(
                f"checkpoint file {file} was refused: it is a raw pickle, not a weights file written by torch.save "
                "(it was not loaded)"
            )
        raise CheckpointError(
            f"checkpoint file {file} is corrupt or truncated (not a zip archive as torch.save writes)"
        )
    try:
        with warnings.catch_warnings():  # torch's advice to load with weights_only=False would run the file's code
            warnings.simplefilter("ignore")
            state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()]
        # PyTorch writes "WeightsUnpickler error:" with the reason on the same line or on a later one
        at = next((i for i, ln in enumerate(lines) if "Unpickler error:" in ln), None)
        after = [ln.split("error:", 1)[-1].strip() if i == at else ln for i, ln in enumerate(lines)][at or 0 :]
        reason = next((ln for ln in after if ln), "") if at is not None else ""
        if "global" in reason.lower():
            raise CheckpointError(
                f"checkpoint file {file} holds objects other than tensors and plain containers; it was not loaded "
                f"(weights-only load refused: {reason})"
            ) from exc
        # (never PyTorch's first line: it advises loading with weights_only=False, which would run the file's code)
        raise CheckpointError(
            f"checkpoint file {file} is corrupt or truncated ({reason or 'not a weights file'})"
        ) from exc
    except Exception as exc:  # truncated zip archive, garbage bytes
        raise CheckpointError(f"checkpoint file {file} is corrupt or truncated ({one_line(exc, first=True)})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint file {file} holds a {type(state).__name__}, not the trainer state (a dict)")
    return state
