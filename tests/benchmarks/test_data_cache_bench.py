"""benchmarks/data_cache: drawn and loaded arrays compared, its table, and one-line refusals."""

from __future__ import annotations

import os

import pytest
from benchmarks.data_cache import data_cache as dc

from pdevision.data.cache import ENV
from pdevision.data.embedded import PATHFINDER_SETS, PathfinderSetSpec, pathfinder_arrays
from pdevision.data.pathfinder import PathfinderConfig


def test_a_tiny_set_is_drawn_written_and_loaded_the_same(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(PATHFINDER_SETS, "pf-bench", PathfinderSetSpec(8, 4, 4, PathfinderConfig(n_dashes=6)))
    out = tmp_path / "table.md"
    assert dc.main(["--sets", "pf-bench:val:32", "--rounds", "2", "--out", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| pf-bench |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["pf-bench", "val", "32", "4"] and cells[8] == "yes" and float(cells[6]) > 0
    assert not list(tmp_path.glob("*.npz")) and ENV not in os.environ  # its cache folder is gone, the variable unset
    pathfinder_arrays.cache_clear()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sets", "nope:val:32"], "NAME one of"),
        (["--sets", "pathfinder:dev:32"], "SPLIT one of"),
        (["--sets", "scenes:test:64"], "SPLIT one of"),
        (["--sets", "pathfinder:val:16"], "32 to 256"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_arguments_are_one_line(argv, message, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        dc.main([*argv, "--out", str(tmp_path / "t.md")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "t.md").exists()
