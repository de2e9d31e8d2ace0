"""Pieces every training loop shares (supervised training, pretraining): device, seeding and RNG
state, autocast, data order, the metrics file."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from pdevision._files import replaced_atomically
from pdevision.errors import UsageError


def one_line(exc: BaseException, first: bool = False, limit: int = 2000) -> str:
    """An exception as one line for a message: its text with whitespace collapsed (``first``: only its first
    non-empty line, for PyTorch's multi-line errors), else its type's name; at most ``limit`` characters."""
    text = str(exc)
    if first:
        text = next((line for line in text.splitlines() if line.strip()), "")
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the run stopped, earlier checkpoints are intact."""


class EpochSampler(Sampler[int]):
    """A fresh permutation each epoch from ``seed + epoch`` alone, so a resumed run sees the same order."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):  # type: ignore[override]
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()  # noqa: NPY002  (timm's mixup draws from the legacy global state)
    state = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_meta": [int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "python": [list(t) if isinstance(t, tuple) else t for t in random.getstate()],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    pos, has_gauss, gauss = state["numpy_meta"]
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, pos, has_gauss, gauss))  # noqa: NPY002
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_host_generators(seed: int) -> None:
    """Seed Python's and NumPy's global generators: timm's augmentations draw from ``random``, its mixup from
    NumPy's global generator."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (the global generator is what timm's mixup draws from)


def seed_everything(seed: int, deterministic: bool) -> None:
    seed_host_generators(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def autocast(device: torch.device, amp: str):
    if amp == "none":
        return torch.autocast(device.type, enabled=False)
    if amp == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if amp == "fp16":
        if device.type != "cuda":
            raise UsageError("--amp fp16 needs a CUDA device; use --amp bf16 on the CPU")
        return torch.autocast("cuda", dtype=torch.float16)
    raise ValueError(f"--amp must be none, bf16 or fp16, got {amp!r}")


def write_metrics(path: Path, history: list[dict[str, Any]]) -> None:
    """Write every epoch's row to ``path`` (rewritten from the run history, so a resumed run never
    repeats or loses a row), through a temporary file and a rename."""
    columns = list(dict.fromkeys(key for row in history for key in row))  # a column added later is kept, too
    with replaced_atomically(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(history)


__all__ = [
    "EpochSampler",
    "NonFiniteLossError",
    "autocast",
    "resolve_device",
    "rng_state",
    "seed_everything",
    "seed_host_generators",
    "set_rng_state",
    "write_metrics",
]
