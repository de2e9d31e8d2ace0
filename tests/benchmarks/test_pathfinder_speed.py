"""benchmarks/archive/pathfinder_speed: a revision's generator imported beside the current one, images compared."""

from __future__ import annotations

import subprocess

import pytest
from benchmarks.archive.pathfinder_speed import pathfinder_speed as ps

from pdevision.data.pathfinder import PathfinderConfig, make_pathfinder

IN_GIT = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ps.ROOT, capture_output=True).returncode == 0


@pytest.mark.skipif(not IN_GIT, reason="needs the project's git history")
def test_the_committed_generator_draws_the_same_images(tmp_path, capsys) -> None:
    md = tmp_path / "speed.md"
    assert (
        ps.main(["--against", "HEAD", "--images", "8", "--rounds", "1", "--sets", "pathfinder-6", "--md", str(md)]) == 0
    )
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| `pathfinder-6`"))
    assert row.endswith("| yes |") and row in md.read_text()
    written = md.read_text()
    md.unlink()
    assert ps.main(["--report-only", "--md", str(md)]) == 0  # the report again, from the record alone
    assert md.read_text() == written


def test_images_that_differ_are_told_apart() -> None:
    cfg = PathfinderConfig(n_dashes=4)
    a, b = make_pathfinder(1, "val", 4, cfg), make_pathfinder(2, "val", 4, cfg)
    assert ps.same(a, a) and not ps.same(a, b)


@pytest.mark.skipif(not IN_GIT, reason="needs the project's git history")
def test_an_unknown_revision_is_one_line() -> None:
    with pytest.raises(SystemExit, match="no generator at revision 'no-such-rev'"):
        ps.main(["--against", "no-such-rev", "--images", "8", "--rounds", "1"])


@pytest.mark.parametrize("argv", [["--images", "0"], ["--rounds", "0"]])
def test_no_images_or_no_rounds_is_refused_in_one_line(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        ps.main(["--against", "HEAD", *argv])
    assert exit_info.value.code == 2 and "must be 1 or more" in capsys.readouterr().err
