"""Process-group set-up for ``torchrun`` launches (single process when not launched by it).

A rank that stops (paused, swapped out, stuck in I/O) makes the others wait in their next
collective. Two guards: every collective of this module logs a warning when it has waited longer
than ``warn_after_s`` (``PDEVISION_DIST_WARN_S``, default 60 s), and the process group is created
with a timeout (``PDEVISION_DIST_TIMEOUT_S``, default 1800 s) after which the waiting collective
fails; this module turns that failure into :class:`DistributedTimeoutError`, which names the rank,
the collective and the timeout, and ends the run. Collectives run by DDP inside ``backward`` are
bounded by the same process-group timeout.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn, TypeVar

import torch
import torch.distributed as dist

from pdevision.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_WARN_S = 60.0

T = TypeVar("T")
_failed = threading.Event()  # a collective timed out: the clean-up skips its barrier


class DistributedTimeoutError(RuntimeError):
    """A collective waited longer than the process group's timeout: another rank stopped or died."""


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{name} must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise UsageError(f"{name} must be positive seconds, got {text!r}")
    return value


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    warn_after_s: float = DEFAULT_WARN_S

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_type: str, timeout_s: float | None = None, warn_after_s: float | None = None) -> DistInfo:
    """Join the process group that ``torchrun`` describes in the environment (gloo on CPU, nccl on GPU),
    with a timeout on every collective (``timeout_s``, default from ``PDEVISION_DIST_TIMEOUT_S`` or 1800 s)."""
    timeout_s = timeout_s if timeout_s is not None else _env_seconds("PDEVISION_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)
    warn_after_s = warn_after_s if warn_after_s is not None else _env_seconds("PDEVISION_DIST_WARN_S", DEFAULT_WARN_S)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(timeout_s=timeout_s, warn_after_s=warn_after_s)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, timeout_s=timeout_s, warn_after_s=warn_after_s)


@contextmanager
def watched(what: str, info: DistInfo) -> Iterator[None]:
    """Run a collective: warn once it waits longer than ``info.warn_after_s``; turn the process group's
    timeout into :class:`DistributedTimeoutError`."""
    done = threading.Event()

    def warn() -> None:
        if not done.wait(info.warn_after_s):
            log.warning(
                "rank %d: %s has waited %g s for the other ranks (one may be paused or stuck); "
                "the run stops after %g s",
                info.rank,
                what,
                info.warn_after_s,
                info.timeout_s,
            )

    watcher = threading.Thread(target=warn, daemon=True)
    watcher.start()
    try:
        yield
    except RuntimeError as exc:  # gloo and nccl report a timed-out or broken collective as RuntimeError
        _failed.set()
        if isinstance(exc, DistributedTimeoutError):
            raise
        raise DistributedTimeoutError(
            f"rank {info.rank}: {what} failed after waiting for the other ranks (process-group timeout "
            f"{info.timeout_s:.0f} s; a rank stopped or died): {' '.join(str(exc).split())[:300]}"
        ) from exc
    finally:
        done.set()


def _collective(what: str, info: DistInfo, call: Callable[[], T]) -> T:
    with watched(what, info):
        return call()


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a list of numbers over ranks (identity in a single process)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    _collective("all_reduce", info, lambda: dist.all_reduce(t))
    return t.tolist()


def parameters_identical_across_ranks(model: torch.nn.Module, info: DistInfo, device: torch.device) -> bool:
    """True when every rank holds bitwise the same parameters (all parameters gathered and compared)."""
    if not info.enabled:
        return True
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()]).to(device)
    gathered = [torch.empty_like(flat) for _ in range(info.world_size)]
    _collective("all_gather of the parameters", info, lambda: dist.all_gather(gathered, flat))
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def barrier(info: DistInfo) -> None:
    if info.enabled:
        _collective("barrier", info, dist.barrier)


def _is_communication_failure(exc: BaseException) -> bool:
    if isinstance(exc, DistributedTimeoutError):
        return True
    text = str(exc).lower()
    return type(exc).__name__ in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(
        s in text for s in ("timed out", "connection closed by peer", "connection reset by peer")
    )


def communication_failed() -> bool:
    """Whether a collective of this process failed (timed out, or a peer vanished)."""
    return _failed.is_set()


def cleanup_distributed(info: DistInfo) -> None:
    """Leave the process group: after a barrier on success; at once while an exception propagates (the other
    ranks may be gone or stuck), noting a communication failure for :func:`communication_failed`."""
    if info.enabled and dist.is_initialized():
        exc = sys.exc_info()[1]
        if exc is not None and _is_communication_failure(exc):
            _failed.set()
        try:
            if exc is None and not _failed.is_set():
                barrier(info)
        finally:
            dist.destroy_process_group()


def exit_after_timeout(code: int) -> NoReturn:
    """End this process now, after a :class:`DistributedTimeoutError`: its communication threads still wait
    for the stopped rank, so a normal interpreter exit would wait with them (measured: until the stopped
    rank itself exits)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except RuntimeError:
            pass
    os._exit(code)


def match_gradient_layout(model: torch.nn.Module) -> int:
    """Give each 4-D parameter whose layout is both NCHW- and NHWC-contiguous (a depthwise convolution's weight, one
    input channel per group: strides (9, 9, 3, 1) and (9, 1, 3, 1) are both contiguous for a 3x3 kernel) the
    channels-last strides that the convolution's backward gives its gradient, the values unchanged; returns how many.

    DDP's bucket views take a parameter's strides and compare its gradient's with them exactly, size-one dimensions
    included, so those weights made every rank warn "Grad strides do not match bucket view strides" at its first
    step. Called before the model is wrapped in DDP, and before an optimizer holds its parameters."""
    count = 0
    for p in model.parameters():
        if p.dim() != 4 or not (p.is_contiguous() and p.is_contiguous(memory_format=torch.channels_last)):
            continue
        strides = torch.empty(p.shape, device="meta", memory_format=torch.channels_last).stride()
        if p.stride() != strides:
            p.data = torch.empty_strided(p.shape, strides, dtype=p.dtype, device=p.device).copy_(p.data)
            count += 1
    return count
