"""Progress bars only on a terminal: a training run whose stderr is a file writes no carriage-return redraws,
one plain log line per epoch; on a terminal (a pseudo-terminal here) the bar is drawn."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["--img-size", "32", "--batch-size", "16", "--max-train-batches", "2", "--val-split", "0.05", "--no-ema"]


def _train(out: Path, epochs: int, stderr: int) -> int:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pdevision.cli", "train", "--model", "vheat_micro", "--epochs", str(epochs)]
    cmd += ["--output", str(out / "run"), "--device", "cpu", *TINY]
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=stderr, env=env, timeout=600).returncode


def test_no_progress_bar_when_stderr_is_a_file(tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as f:
        assert _train(tmp_path, 3, f.fileno()) == 0
    text = log.read_bytes()
    assert b"\r" not in text, text[:300]
    lines = text.decode().splitlines()
    assert [int(m.group(1)) for m in (re.match(r"epoch (\d+)/3  train loss", s) for s in lines) if m] == [1, 2, 3]
    assert not any("it/s" in s or "s/it" in s or "%|" in s for s in lines)  # no bar drawn on a line of its own


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        code = _train(tmp_path, 1, follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal is closed once everything is read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert code == 0
    assert b"\r" in b"".join(chunks) and b"epoch 1/1" in b"".join(chunks)
