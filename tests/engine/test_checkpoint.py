"""Checkpoints are written atomically: a crash mid-write leaves the previous one intact."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch
from torch import nn

from pdevision.engine.checkpoint import CheckpointError, load_trainer_state, load_weights, read_meta, resolve_checkpoint
from pdevision.engine.save import save_checkpoint


def _model(value: float) -> nn.Module:
    m = nn.Linear(3, 2)
    with torch.no_grad():
        m.weight.fill_(value)
    return m


def test_round_trip_and_metadata(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "last", _model(1.0), {"model": "m", "classes": ["a", "b"]}, {"epoch": 4})
    save_checkpoint(tmp_path, "best", _model(2.0), {"model": "m"})  # best carries no trainer state
    assert read_meta(tmp_path / "last") == {"model": "m", "classes": ["a", "b"], "format": "pdevision"}
    assert torch.equal(load_weights(tmp_path / "last")["weight"], torch.ones(2, 3))
    assert resolve_checkpoint(tmp_path) == tmp_path / "best"  # to evaluate: best first
    assert resolve_checkpoint(tmp_path, prefer=("last",)) == tmp_path / "last"  # to resume
    assert load_trainer_state(resolve_checkpoint(tmp_path, prefer=("last",)))["epoch"] == 4
    assert resolve_checkpoint(tmp_path / "last" / "model.safetensors") == tmp_path / "last"


def test_crash_while_writing_keeps_previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, "last", _model(1.0), {"epoch": 1}, {"epoch": 1})
    real_save = torch.save

    def crash(obj, f, *args, **kwargs):  # write half a file, then die
        f.write(b"partial")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, "last", _model(2.0), {"epoch": 2}, {"epoch": 2})
    monkeypatch.setattr(torch, "save", real_save)
    assert read_meta(tmp_path / "last") == {"epoch": 1, "format": "pdevision"}
    assert torch.equal(load_weights(tmp_path / "last")["weight"], torch.ones(2, 3))
    assert not list(tmp_path.glob(".last.tmp-*"))  # the partial folder was removed


def test_interrupted_swap_falls_back_to_old(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "last", _model(1.0), {"epoch": 1})
    (tmp_path / "last").rename(tmp_path / ".last.old")  # crash between the two renames
    assert resolve_checkpoint(tmp_path / "last") == tmp_path / ".last.old"
    assert resolve_checkpoint(tmp_path, prefer=("last",)) == tmp_path / ".last.old"
    (tmp_path / ".last.tmp-killed").mkdir()  # a writer killed mid-write leaves its folder behind
    save_checkpoint(tmp_path, "last", _model(3.0), {"epoch": 2})
    assert read_meta(tmp_path / "last") == {"epoch": 2, "format": "pdevision"} and not (tmp_path / ".last.old").exists()
    assert not list(tmp_path.glob(".last.tmp-*"))


def test_trainer_state_is_read_with_weights_only(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "last", _model(1.0), {}, {"epoch": 0})

    class Payload:
        def __reduce__(self):
            return (print, ("code ran",))

    torch.save({"epoch": 0, "evil": Payload()}, tmp_path / "last" / "trainer.pt")
    with pytest.raises(Exception, match=r"(?i)weights.only|unsupported global"):
        load_trainer_state(tmp_path / "last")


def test_missing_checkpoint_is_clear(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        resolve_checkpoint(tmp_path / "nothing")
    safetensors.torch.save_file({"w": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="no trainer state"):
        load_trainer_state(tmp_path)
