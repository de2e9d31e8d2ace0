"""Writing checkpoints: a folder per checkpoint, written atomically, safe under repeated faults (read back by
:mod:`pdevision.engine.checkpoint`).

Layout of ``<run>/<name>/`` (``name`` is ``last``, ``best`` or ``encoder``):

* ``model.safetensors``: model weights; metadata holds the model name, class names and the
  model arguments needed to rebuild it (JSON strings).
* ``ema.safetensors``: EMA weights, when EMA is on.
* ``config.json``: timm's model config (architecture, classes, pretrained cfg) for backbone checkpoints, so that
  ``timm.create_model("local-dir:RUN/best")`` loads the folder (:mod:`pdevision.engine.hub`).
* ``trainer.pt``: optimizer, scheduler, scaler, epoch, sampler position and RNG states, read back
  with ``torch.load(weights_only=True)``.

Beside ``best/``, :func:`link_best` makes ``<run>/best.safetensors``, a relative link to ``best/model.safetensors``, so
that ``timm.create_model("local-dir:RUN")`` loads the run's best weights (``RUN/config.json`` holds timm's keys).

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
:func:`pdevision.engine.checkpoint.resolve_checkpoint` then returns.
``tests/engine/test_checkpoint_refusals.py`` injects a fault at every step, twice in a row. Folders and files
follow the umask.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn

from pdevision.engine.hub import HUB_CONFIG, hub_config_bytes

__all__ = [
    "BEST_LINK",
    "NO_SPACE_ERRNOS",
    "WRITTEN",
    "NoSpaceError",
    "link_best",
    "no_space_message",
    "recover_checkpoint",
    "save_checkpoint",
]

log = logging.getLogger(__name__)

# the run folder's link to its best weights (link_best)
BEST_LINK = "best.safetensors"
_BEST_TARGET = Path("best", "model.safetensors")
# the files a save writes into a checkpoint folder: the next save deletes these and nothing else
WRITTEN = ("model.safetensors", "ema.safetensors", HUB_CONFIG, "trainer.pt")


class NoSpaceError(RuntimeError):
    """A write failed for want of space (a full disk, a quota, a file-size limit); nothing was half-written."""


# errors of a write that mean "no room for this file": a full disk, a quota, a file-size limit (RLIMIT_FSIZE)
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_space_message(exc: OSError, what: str | Path) -> str:
    """One line for a write of ``what`` that failed with one of :data:`NO_SPACE_ERRNOS`."""
    why = {errno.EFBIG: " (a file reached the file-size limit)", errno.EDQUOT: " (disk quota exceeded)"}
    return f"no space left on device while writing {what}{why.get(exc.errno or 0, '')}"


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
                _discard(old, name)  # redundant: final is complete
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old.exists():
        _discard(old, name)
    return final


def _discard(old: Path, name: str) -> None:
    """Delete a previous checkpoint folder's files (:data:`WRITTEN`). Anything else in it was not written by a save
    (commands refuse to write there, but a hand can): the folder is then kept, renamed ``<name>-kept-<n>`` beside
    it, with a warning, rather than deleted."""
    for file in WRITTEN:
        with contextlib.suppress(FileNotFoundError):
            (old / file).unlink()
    try:
        old.rmdir()
    except OSError:  # not empty
        n = 1
        while (old.parent / f"{name}-kept-{n}").exists():
            n += 1
        kept = old.parent / f"{name}-kept-{n}"
        os.replace(old, kept)
        log.warning("%s held files the save of %s did not write; they were moved to %s", old, name, kept)


def link_best(run_dir: Path) -> bool:
    """Make ``run_dir/best.safetensors`` a relative link to ``best/model.safetensors`` (once: the link follows each
    save's new ``best/``, and moves with the folder), so that timm's ``local-dir:RUN`` finds the run's best weights
    as the folder's one ``.safetensors`` file; whether the link is there.

    Anything else of that name (a user's file, another link) is never replaced: a warning says so. Where links cannot
    be made (Windows without the privilege to create them), a warning says that ``local-dir:RUN/best`` loads the
    same weights; no copy is made, as it would go stale when ``best/`` is saved again."""
    link = Path(run_dir) / BEST_LINK
    if link.is_symlink() and Path(os.readlink(link)) == _BEST_TARGET:
        return True
    try:
        os.symlink(_BEST_TARGET, link)  # never replaces: an existing name is FileExistsError
    except FileExistsError:
        log.warning(
            "%s is not the run's link to best/model.safetensors and is left as it is; timm loads the run's "
            "best weights with local-dir:%s",
            link,
            link.parent / "best",
        )
        return False
    except OSError as exc:
        log.warning(
            "%s could not be made (%s); timm loads the run's best weights with local-dir:%s",
            link,
            exc.strerror or type(exc).__name__,
            link.parent / "best",
        )
        return False
    return True
