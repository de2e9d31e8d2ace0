"""benchmarks/archive/pathfinder_collapse: the spread reads zero for one image repeated; a checkpoint gets its rows."""

from __future__ import annotations

import json

import pytest
import torch
from benchmarks.archive.pathfinder_collapse import pathfinder_collapse as pc

from pdevision.engine.save import save_checkpoint

ARGS = {"mixer": "pooling", "dims": 16, "stem": "conv"}


def test_the_spread_is_zero_for_one_image_repeated_and_not_for_different_images() -> None:
    torch.manual_seed(0)
    model = pc.pf.build(ARGS)
    x = torch.randn(6, 3, 32, 32)
    varied = pc.spread(model, x)
    same = pc.spread(model, x[:1].repeat(6, 1, 1, 1))
    assert len(varied["stages"]) == 4 and all(s > 0 and m > 0 for s, m in varied["stages"]) and varied["logits"] > 0
    assert all(s == pytest.approx(0.0, abs=1e-6) for s, _ in same["stages"]) and same["logits"] < 1e-6
    assert [m for _, m in same["stages"]] == pytest.approx([m for _, m in varied["stages"]], rel=0.5)


@pytest.mark.slow  # the archived study's run machinery: the study is closed, its record tests stay fast
def test_a_checkpoint_gets_a_trained_and_a_step_0_row(tmp_path, capsys) -> None:
    model = pc.pf.build(ARGS)
    meta = {"model": pc.pf.MODEL, "model_args": ARGS, "classes": ["no", "yes"], "kind": "classify", "img_size": 32}
    save_checkpoint(tmp_path / "run", "last", model, {**meta, "epoch": 3})
    assert pc.main([str(tmp_path / "run"), "--images", "8", "--md", str(tmp_path / "collapse.md")]) == 0
    out = capsys.readouterr().out
    assert "| run (not in the record), epoch 3 |" in out and "| run, step 0 |" in out
    assert "8 validation images" in out and out.count("\n|") == 4  # header, rule, two rows
    assert (tmp_path / "collapse.md").read_text() == out.rstrip("\n") + "\n"
    assert len(json.loads((tmp_path / "collapse.json").read_text())["data"]) == 2  # the rows, in the record


@pytest.mark.parametrize("argv", [["--images", "1"], ["--images", "100000"]])
def test_an_image_count_without_a_spread_is_refused_in_one_line(tmp_path, argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pc.main([str(tmp_path), *argv])
    assert exit_info.value.code == 2 and "--images must be from 2 to" in capsys.readouterr().err


def test_a_folder_that_is_no_checkpoint_is_one_line(tmp_path) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit, match=r"^pathfinder_collapse: .*run") as exit_info:
        pc.main([str(tmp_path / "run"), "--images", "4"])
    assert "\n" not in str(exit_info.value.code)
