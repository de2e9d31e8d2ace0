"""An exclusive lock on a run folder, so two runs never write into one ``--output``.

The lock is ``<run>/.lock``: an operating-system lock on that file (``filelock``'s descriptor lock: ``flock``
on Unix, ``LockFileEx`` on Windows), which the system releases when the holder dies, and the holder's PID and
host written in it for the message to a second run. A lock
file left by a process that no longer runs (killed) is stale: it is taken over, with a warning
naming the dead PID. On release the file is removed.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from types import TracebackType

from filelock import lock_descriptor, unlock_descriptor

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


class RunLockedError(RuntimeError):
    """The run folder is locked by another running process."""


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 256).decode(errors="replace").strip()
    except OSError:  # Windows: the byte range another process locked cannot be read
        return ""


class RunLock:
    """Exclusive lock on ``run_dir`` (created if missing), as a context manager or with
    :meth:`acquire` / :meth:`release`. ``enabled=False`` makes it a no-op (ranks other than 0 of a
    distributed run, which share rank 0's lock)."""

    def __init__(self, run_dir: str | Path, enabled: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.enabled = enabled
        self._fd: int | None = None
        self._created: list[Path] = []  # the folders acquire made, removed again on release when left empty
        self.took_over: str | None = None  # the stale holder's line, when the lock was taken over

    def acquire(self) -> RunLock:
        if not self.enabled or self._fd is not None:
            return self
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunLockedError(f"run folder {self.run_dir} exists and is not a folder")
        self._created = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                locked = lock_descriptor(fd, blocking=False)
            except OSError:
                os.close(fd)
                raise
            if not locked:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(
                    f"run folder {self.run_dir} is in use by another run ({holder or 'unknown process'}; "
                    f"lock file {self.path}): wait for it to finish or choose another --output"
                ) from None
            try:  # the file may have been removed by the previous holder's release: lock the current one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            break
        previous = _read_holder(fd)
        if previous:
            self.took_over = previous
            log.warning(
                "run folder %s: taking over the stale lock of a process that no longer runs (%s)",
                self.run_dir,
                previous,
            )
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # empty: where the unlink below is refused (Windows), no stale holder is left
            self.path.unlink(missing_ok=True)  # while still holding the lock (see the inode check above)
        except PermissionError:
            pass
        finally:
            unlock_descriptor(self._fd)
            os.close(self._fd)
            self._fd = None
            for folder in self._created:  # a run that failed before writing anything leaves no empty folder
                try:
                    folder.rmdir()
                except OSError:
                    break
            self._created = []

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
