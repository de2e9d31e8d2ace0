"""One run per run folder: a lock file with the holder's PID; a second run is refused with one line,
a stale lock (its holder was killed) is taken over with a warning (issue 16, defect 4)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pdevision.cli import main
from pdevision.engine.lock import LOCK_NAME, RunLock, RunLockedError

HOLD = (
    "import sys, time; from pdevision.engine.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
    "print('locked', flush=True); time.sleep(60)"
)


def _holder(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_lock_is_refused_and_released_lock_is_free(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunLock(run) as lock:
        assert lock.held and f"pid {os.getpid()}" in (run / LOCK_NAME).read_text()
        with pytest.raises(RunLockedError, match=rf"in use by another run \(pid {os.getpid()} on "):
            RunLock(run).acquire()
    assert not (run / LOCK_NAME).exists()
    with RunLock(run) as again:  # released: free again
        assert again.held and again.took_over is None
    assert RunLock(run, enabled=False).acquire().held is False


def test_another_process_holds_the_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _holder(run)
    try:
        with pytest.raises(RunLockedError, match=rf"pid {proc.pid} "):
            RunLock(run).acquire()
    finally:
        proc.kill()
        proc.wait()


def test_stale_lock_of_a_killed_process_is_taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = tmp_path / "run"
    proc = _holder(run)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert f"pid {proc.pid}" in (run / LOCK_NAME).read_text()  # left behind by the killed holder
    with caplog.at_level(logging.WARNING), RunLock(run) as lock:
        assert lock.took_over is not None and f"pid {proc.pid}" in lock.took_over
        assert f"pid {os.getpid()}" in (run / LOCK_NAME).read_text()
    assert "taking over the stale lock" in caplog.text and f"pid {proc.pid}" in caplog.text


@pytest.mark.parametrize("command", ["train", "pretrain"])
def test_a_second_run_on_one_output_is_refused(tmp_path: Path, command: str, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    (run / "last").mkdir(parents=True)
    (run / "last" / "model.safetensors").write_bytes(b"being written by the first run")
    with RunLock(run):
        assert main([command, "--output", str(run), "--epochs", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in use by another run" in err[0] and "Traceback" not in err[0]
    assert (run / "last" / "model.safetensors").read_bytes() == b"being written by the first run"
