"""Checkpoints: a folder per checkpoint, written atomically.

Layout of ``<run>/<name>/`` (``name`` is ``last`` or ``best``):

* ``model.safetensors``: model weights; metadata holds the model name, class names and the
  model arguments needed to rebuild it (JSON strings).
* ``ema.safetensors``: EMA weights, when EMA is on.
* ``trainer.pt``: optimizer, scheduler, scaler, epoch, sampler position and RNG states, read back
  with ``torch.load(weights_only=True)``.

The folder is written under a temporary name, flushed, then swapped in with renames, so a crash
while writing leaves the previous checkpoint complete (if it crashes between the two renames, the
previous folder is found under ``.<name>.old`` and :func:`resolve_checkpoint` uses it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the model."""


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


def save_checkpoint(
    run_dir: Path,
    name: str,
    model: nn.Module,
    meta: dict[str, Any],
    trainer_state: dict[str, Any] | None = None,
    ema: nn.Module | None = None,
) -> Path:
    """Write ``run_dir/name`` atomically and return its path. ``meta`` values must be JSON-serialisable."""
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / name
    for stale in run_dir.glob(f".{name}.tmp-*"):  # left by a process killed while writing
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=run_dir))
    try:
        metadata = {k: json.dumps(v) for k, v in meta.items()}
        safetensors.torch.save_file(_state_dict_for_save(model), str(tmp / "model.safetensors"), metadata=metadata)
        if ema is not None:
            safetensors.torch.save_file(_state_dict_for_save(ema), str(tmp / "ema.safetensors"), metadata=metadata)
        if trainer_state is not None:
            with open(tmp / "trainer.pt", "wb") as f:
                torch.save(trainer_state, f)
        for file in tmp.iterdir():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = run_dir / f".{name}.old"
        if old.exists():
            shutil.rmtree(old)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(run_dir)
        if old.exists():
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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


def read_meta(path: str | Path) -> dict[str, Any]:
    """The metadata stored with a checkpoint's weights (model name, classes, arguments, epoch)."""
    folder = resolve_checkpoint(path)
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        raw = f.metadata() or {}
    return {k: json.loads(v) for k, v in raw.items()}


def load_weights(path: str | Path, ema: bool = False) -> dict[str, torch.Tensor]:
    """Weights of a checkpoint folder (the EMA copy with ``ema=True`` where present)."""
    folder = resolve_checkpoint(path)
    file = folder / ("ema.safetensors" if ema and (folder / "ema.safetensors").exists() else "model.safetensors")
    return safetensors.torch.load_file(str(file))


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Trainer state (optimizer, scheduler, RNG, epoch), read with ``weights_only=True``."""
    folder = resolve_checkpoint(path)
    file = folder / "trainer.pt"
    if not file.exists():
        raise CheckpointError(f"checkpoint {folder} has no trainer state (trainer.pt); it cannot be resumed")
    return torch.load(file, map_location="cpu", weights_only=True)
