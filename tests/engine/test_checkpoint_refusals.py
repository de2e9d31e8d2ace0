"""Checkpoint saves under faults (a fault injected at every step, twice in a row), corrupt checkpoint
files, and permissions that follow the umask (issue 16, defects 8, 10, 13)."""

from __future__ import annotations

import os
import random
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

from pdevision.engine.checkpoint import CheckpointError, load_trainer_state, load_weights, read_meta, resolve_checkpoint
from pdevision.engine.save import save_checkpoint


class Killed(BaseException):
    """The process died: raised at the chosen step and by every later file-system step (no clean-up runs)."""


def _model(value: float) -> nn.Module:
    m = nn.Linear(3, 2)
    with torch.no_grad():
        m.weight.fill_(value)
        m.bias.fill_(value)
    return m


def _save(run: Path, value: int) -> None:
    save_checkpoint(run, "last", _model(value), {"epoch": value}, {"epoch": value}, ema=_model(value))


def _loaded_value(run: Path) -> int:
    """The epoch of the checkpoint a resume finds, after checking that all its files agree (complete)."""
    folder = resolve_checkpoint(run, prefer=("last",))
    value = read_meta(folder)["epoch"]
    assert torch.equal(load_weights(folder)["weight"], torch.full((2, 3), float(value)))
    assert torch.equal(load_weights(folder, ema=True)["bias"], torch.full((2,), float(value)))
    assert load_trainer_state(folder)["epoch"] == value
    return value


@contextmanager
def _fault_at(monkeypatch: pytest.MonkeyPatch, step: int) -> Iterator[list[str]]:
    """Kill the save at its ``step``-th file-system step (rename, delete, fsync, pickle write); a delete is
    killed half-way (one file gone). Yields the list of steps seen."""
    seen: list[str] = []
    dead = [False]
    # fsync is counted as a step but not done: the test is about the order of steps, not the disk
    real = {"replace": os.replace, "rename": os.rename, "rmtree": shutil.rmtree, "fsync": lambda fd: None}
    real_torch_save = torch.save

    def hook(name: str, call, *args, **kwargs):
        if dead[0]:
            raise Killed(f"dead before {name}")
        seen.append(name)
        if len(seen) - 1 == step:
            dead[0] = True
            if name == "rmtree":
                files = sorted(p for p in Path(args[0]).rglob("*") if p.is_file())
                if files:
                    files[0].unlink()
            raise Killed(f"killed at {name}")
        return call(*args, **kwargs)

    with monkeypatch.context() as m:
        for name in ("replace", "rename", "fsync"):
            m.setattr(os, name, lambda *a, _n=name, **k: hook(_n, real[_n], *a, **k))
        m.setattr(shutil, "rmtree", lambda *a, **k: hook("rmtree", real["rmtree"], *a, **k))
        m.setattr(torch, "save", lambda *a, **k: hook("torch.save", real_torch_save, *a, **k))
        yield seen


def _steps_of_a_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    run = tmp_path / "count"
    _save(run, 1)
    with _fault_at(monkeypatch, 10**9) as seen:
        _save(run, 2)
    return len(seen)


def test_a_fault_at_every_step_then_another_leaves_a_complete_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # saves outside the fault window: no disk flush needed
    steps = _steps_of_a_save(tmp_path, monkeypatch)
    assert steps >= 6  # writes, fsyncs, renames and deletes are all exercised
    outcomes = set()
    for i in range(steps + 1):
        run = tmp_path / f"first{i}"
        _save(run, 1)
        _save(run, 2)  # an .old folder may or may not exist: both are exercised by the steps
        with _fault_at(monkeypatch, i):
            try:
                _save(run, 3)
            except Killed:
                pass
        first = _loaded_value(run)  # resume after the first fault
        assert first in (2, 3)
        outcomes.add(first)
        for j in range(steps + 2):  # a second fault, in the save after the recovery
            again = tmp_path / f"second{i}-{j}"
            shutil.copytree(run, again, symlinks=True)
            with _fault_at(monkeypatch, j):
                try:
                    _save(again, 4)
                except Killed:
                    pass
            assert _loaded_value(again) in (first, 4)
            _save(again, 5)  # and a later save without fault completes normally
            assert _loaded_value(again) == 5
            assert sorted(p.name for p in again.iterdir()) == ["last"]
            shutil.rmtree(again)
    assert outcomes == {2, 3}  # faults early keep the previous checkpoint, faults late the new one


def test_the_double_fault_of_the_issue(tmp_path: Path) -> None:
    """Killed between the two renames (only .last.old remains), resumed from it, killed again right after a
    delete of .last.old: the old protocol lost every checkpoint here."""
    _save(tmp_path, 1)
    (tmp_path / "last").rename(tmp_path / ".last.old")
    assert _loaded_value(tmp_path) == 1
    real_rmtree = shutil.rmtree

    def killed_after_delete(path, *args, **kwargs):
        real_rmtree(path, *args, **kwargs)
        if Path(path).name == ".last.old":
            raise Killed("killed after removing .last.old")

    with pytest.MonkeyPatch.context() as m:
        m.setattr(shutil, "rmtree", killed_after_delete)
        try:
            _save(tmp_path, 2)
        except Killed:
            pass
    assert _loaded_value(tmp_path) in (1, 2)


def test_a_concurrent_writers_temp_folder_is_not_deleted(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    alive = tmp_path / f".last.tmp-{os.getppid()}-abcd"  # a running process (our parent) writing
    dead = tmp_path / ".last.tmp-killed"
    alive.mkdir()
    dead.mkdir()
    _save(tmp_path, 2)
    assert alive.exists() and not dead.exists()


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_permissions_follow_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        _save(tmp_path / "run", 1)
        _save(tmp_path / "run", 2)
    finally:
        os.umask(old)
    folder = tmp_path / "run" / "last"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o777 & ~mask
    for file in folder.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o666 & ~mask, file.name


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        ("model.safetensors", "truncate"),
        ("model.safetensors", "garbage"),
        ("model.safetensors", "empty"),
        ("trainer.pt", "truncate"),
        ("trainer.pt", "garbage"),
    ],
)
def test_corrupt_checkpoint_files_are_one_line_errors(tmp_path: Path, file: str, damage: str) -> None:
    _save(tmp_path, 1)
    path = tmp_path / "last" / file
    data = path.read_bytes()
    garbage = b"\x01" + random.Random(0).randbytes(299)  # not a zip, not a pickle (0x80): seeded, not os.urandom
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": garbage, "empty": b""}[damage])
    load = load_trainer_state if file == "trainer.pt" else read_meta
    with pytest.raises(CheckpointError) as exc:
        load(tmp_path / "last")
    message = str(exc.value)
    assert str(path) in message and "corrupt or truncated" in message and "\n" not in message
    assert "weights_only" not in message  # PyTorch's advice to load it unsafely is not passed on
    if file == "model.safetensors":
        with pytest.raises(CheckpointError, match="corrupt or truncated"):
            load_weights(tmp_path / "last")


def test_metadata_that_is_not_json_is_a_checkpoint_error(tmp_path: Path) -> None:
    import safetensors.torch

    (tmp_path / "c").mkdir()
    safetensors.torch.save_file({"w": torch.zeros(1)}, str(tmp_path / "c" / "model.safetensors"), {"model": "{x"})
    with pytest.raises(CheckpointError, match="not JSON"):
        read_meta(tmp_path / "c")
