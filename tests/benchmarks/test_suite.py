"""benchmarks/ as a suite: the index names every study, every report has its record and is made from it again by
``--report-only``, the scripts share one helper imported as a package (no ``sys.path``), one atomic write."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.archive.bench_cpu import bench_cpu

from benchmarks import records
from pdevision.bench.compare import markdown_table

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
INDEX = (BENCH / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#\s]+)")
SCRIPTS = sorted(p for p in BENCH.rglob("*.py") if p.name not in ("__init__.py", "records.py"))
# reports that are notes written by hand beside a record (each says so in the index), not reports of a record
NOTES = {
    "bench_cpu_perf/machine_check/README.md",
    "waveformer_bench/README.md",
    "viz/README.md",
    "archive/default_allocator/README.md",
    "archive/fastpath_split/notes.md",
}
# the archived report that summarise.py makes from the records of six runs (before*/, after*/ beside it)
NO_RECORD = {"archive/fastpath_split/results.md"}
REPORTS = sorted(
    p
    for p in BENCH.rglob("*.md")
    if p.name != "README.md" or p.parent != BENCH
    if str(p.relative_to(BENCH)) not in NOTES | NO_RECORD
)


def _module(script: Path) -> str:
    return ".".join(script.relative_to(ROOT).with_suffix("").parts)


def test_the_index_links_every_study_folder_and_every_link_resolves() -> None:
    links = LINK.findall(INDEX)
    assert not [link for link in links if "://" not in link and not (BENCH / link).exists()]
    linked = {
        Path(link).parts[0] if Path(link).parts[0] != "archive" else "/".join(Path(link).parts[:2]) for link in links
    }
    folders = {p.name for p in BENCH.iterdir() if p.is_dir() and p.name not in ("archive", "__pycache__")}
    folders |= {f"archive/{p.name}" for p in (BENCH / "archive").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - linked == set()
    assert "| ablations" not in INDEX.split("## Archive")[1] and "[mixers](archive/" in INDEX.split("## Archive")[1]


def test_every_report_has_its_record() -> None:
    """Beside each report, the JSON it is made from: same name, or the `pdevision bench` folder's results.json."""
    missing = [str(p.relative_to(BENCH)) for p in REPORTS if not p.with_suffix(".json").exists()]
    assert missing == []
    assert len(REPORTS) >= 40


def test_every_report_only_makes_the_committed_report_again(tmp_path: Path) -> None:
    """Each study's ``--report-only`` (and the archived fastpath_split's summary), run in a copy of the folder,
    writes back every file byte for byte: no report drifts from its record."""
    copy = tmp_path / "benchmarks"
    shutil.copytree(BENCH, copy, ignore=shutil.ignore_patterns("__pycache__"))
    modules = [_module(p) for p in SCRIPTS if p.stem == p.parent.name and "--report-only" in p.read_text()]
    modules += [_module(p) for p in SCRIPTS if "add_report_only(" in p.read_text() and _module(p) not in modules]
    assert len(modules) >= 28 and "benchmarks.archive.bench_cpu.bench_cpu" in modules
    code = (
        "import contextlib, importlib, io, sys\n"
        f"for name in {modules!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "        importlib.import_module(name).main(['--report-only'])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")]), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    changed = [
        str(p.relative_to(copy))
        for p in sorted(copy.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.read_bytes() != (BENCH / p.relative_to(copy)).read_bytes()
    ]
    assert changed == []


def test_no_script_reaches_another_by_sys_path_and_every_study_takes_report_only() -> None:
    texts = {p: p.read_text() for p in SCRIPTS}
    assert [p.name for p, text in texts.items() if "sys.path" in text] == []
    assert [p.name for p, text in texts.items() if "os.replace" in text or ".replace(path)" in text] == []
    studies = [p for p in SCRIPTS if p.stem == p.parent.name]  # the study's own script, named like its folder
    assert len(studies) >= 25
    figures_only = {"pathfinder_samples.py"}  # draws a figure for the docs, writes no report
    assert [
        p.name
        for p in studies
        if p.name not in figures_only and "add_report_only(" not in texts[p] and "--report-only" not in texts[p]
    ] == []


def test_the_machine_is_described_in_one_place() -> None:
    """Scripts take the machine from records.machine_line / bench.measure, never from platform or os.cpu_count."""
    rebuilt = [
        p.name for p in SCRIPTS if re.search(r"platform\.(processor|machine)\(\)|os\.cpu_count\(\)", p.read_text())
    ]
    assert rebuilt == []
    assert records.machine_line(threads=3).count(", ") >= 3 and "3 threads" in records.machine_line(threads=3)


@pytest.mark.parametrize(
    "record",
    sorted(p for p in BENCH.rglob("*.json") if "blocks" in json.loads(p.read_text())),
    ids=lambda p: str(p.relative_to(BENCH)),
)
def test_a_report_made_of_blocks_is_its_record_rendered(record: Path) -> None:
    assert record.with_suffix(".md").read_text() == records.report_of(json.loads(record.read_text()))


@pytest.mark.parametrize(
    "record",
    sorted(p for p in BENCH.rglob("results.json") if "archive/bench_cpu/" not in str(p)),
    ids=lambda p: str(p.relative_to(BENCH)),
)
def test_a_bench_report_is_its_record_rendered(record: Path) -> None:
    assert record.with_name("results.md").read_text() == markdown_table(json.loads(record.read_text()))


def test_the_first_bench_record_is_rendered_in_its_own_columns() -> None:
    """The archived first bench record predates the dtype and ratio columns: its own script renders it."""
    folder = BENCH / "archive" / "bench_cpu"
    record = json.loads((folder / "results.json").read_text())
    assert (folder / "results.md").read_text() == bench_cpu.report(record)
    record["rows"][0]["infer_img_s"] = 1.0  # the report follows its record
    assert "| vheat_tiny | 224 | 8 | 30.9 | 4.6 | 1.00 |" in bench_cpu.report(record)


def test_blocks_round_trip_tables_and_keep_irregular_tables_as_text() -> None:
    text = "# T\n\nintro line\n\n| a | b |\n|---|---:|\n| 1 | 2.5 |\n\n|odd|table|\n|-|-|\n"
    blocks = records.blocks_of(text)
    assert blocks["title"] == "T" and records.report_of(blocks) == text
    table = next(b["table"] for b in blocks["blocks"] if "table" in b)
    assert table == {"columns": ["a", "b"], "align": "|---|---:|", "rows": [["1", "2.5"]]}
    assert sum("table" in b for b in blocks["blocks"]) == 1  # the irregular one stays text, verbatim


def test_save_study_then_report_only_give_the_same_report(tmp_path: Path) -> None:
    record, report = tmp_path / "s.json", tmp_path / "s.md"
    saved = records.save_study(record, report, "# S\n\n| x | y |\n|---|---|\n| 1 | 2 |", "python -m s", data=[1])
    written = report.read_text()
    report.unlink()
    records.rewrite_report(record, report)
    assert report.read_text() == written and saved["data"] == [1] and saved["command"] == "python -m s"
    assert set(saved["machine"]) >= {"cpu", "cores", "threads", "torch"}


@pytest.mark.parametrize("script", [p for p in SCRIPTS if p.stem == p.parent.name], ids=lambda p: p.stem)
def test_every_study_imports_as_a_package_module(script: Path) -> None:
    module = importlib.import_module(_module(script))
    assert callable(module.main)
