"""The studies' one shared helper: their JSON records and Markdown reports, written atomically, and the machine.

Every study keeps a JSON record beside its script and a report generated from that record (``--report-only``
regenerates it without measuring). A record is a plain JSON object; a study that renders its report with
:func:`report_of` keeps the report's content in the record as ``title`` and ``blocks`` (paragraphs as text, tables
as columns and rows), so the report is a function of the record alone. A record transcribed from a report that
had no JSON says so in ``transcribed`` (the report it was read from and the commit that held it).

Run a study from the repository root as a module (``python -m benchmarks.<study>.<study>``); a record that carries
its blocks is rendered by ``python -m benchmarks.records RECORD.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import torch

from pdevision._files import write_atomically
from pdevision.bench.compare import markdown_table
from pdevision.bench.measure import machine_description

ROOT = Path(__file__).resolve().parent  # the benchmarks folder
REPOSITORY = ROOT.parent


# -- records ---------------------------------------------------------------------------------------------------------
def read_record(path: str | Path, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON record at ``path``; ``empty`` (a copy) when there is none yet and ``empty`` is given."""
    path = Path(path)
    if not path.exists() and empty is not None:
        return json.loads(json.dumps(empty))
    return json.loads(path.read_text())


def write_record(path: str | Path, record: dict[str, Any], sort_keys: bool = True, indent: int = 1) -> None:
    """Write ``record`` to ``path`` as JSON in one step (a reader never sees half a record)."""
    write_atomically(path, json.dumps(record, indent=indent, sort_keys=sort_keys, default=str) + "\n")


def write_report(path: str | Path, text: str) -> None:
    """Write a report (Markdown) in one step, ending in a newline."""
    write_atomically(path, text if text.endswith("\n") else text + "\n")


def commit() -> str | None:
    """The repository's commit (``git rev-parse HEAD``), ``None`` outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def header(command: str, device: str = "cpu") -> dict[str, Any]:
    """What every record says about its run: the command, the machine, the commit and the date."""
    return {
        "command": command,
        "machine": machine_description(torch.device(device)),
        "commit": commit(),
        "date": date.today().isoformat(),
    }


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command that ran a study: ``python -m MODULE ARGS`` (``argv``, else the process's arguments)."""
    return " ".join(["python -m", module, *(sys.argv[1:] if argv is None else argv)])


def add_report_only(parser: argparse.ArgumentParser) -> None:
    """The ``--report-only`` flag every study has: write its report from its JSON record, measuring nothing."""
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from the JSON record beside it, measuring nothing"
    )


# -- the machine -----------------------------------------------------------------------------------------------------
def machine_line(threads: int | None = None, device: str = "cpu") -> str:
    """``"AMD EPYC, 2 cores, 2 threads, torch 2.x"`` from :func:`pdevision.bench.measure.machine_description`."""
    m = machine_description(torch.device(device))
    line = f"{m['cpu']}, {m['cores']} cores, {threads or m['threads']} threads, torch {m['torch']}"
    return f"{line}, {m['gpu']}" if "gpu" in m else line


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, as a report quotes them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


# -- reports as blocks -----------------------------------------------------------------------------------------------
def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("|")]


def _table(lines: list[str]) -> dict[str, Any] | None:
    """A Markdown table as its columns, its alignment line (verbatim) and its rows of cells; ``None`` when rendering
    it back would not give the same lines (then it stays text)."""
    if len(lines) < 2 or not all(line.startswith("|") and line.endswith("|") for line in lines):
        return None
    table = {"columns": _cells(lines[0]), "align": lines[1], "rows": [_cells(line) for line in lines[2:]]}
    return table if _table_lines(table) == lines else None


def _table_lines(table: dict[str, Any]) -> list[str]:
    row = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return [row(table["columns"]), table["align"], *(row(cells) for cells in table["rows"])]


def blocks_of(markdown: str) -> dict[str, Any]:
    """A report's ``title`` (its first ``# `` line) and ``blocks``: each run of table lines a table, the lines
    between them text (verbatim)."""
    lines = markdown.rstrip("\n").split("\n")
    title = lines[0][2:] if lines and lines[0].startswith("# ") else None
    body = lines[1:] if title is not None else lines
    blocks: list[dict[str, Any]] = []
    i = 0
    while i < len(body):
        j = i
        while j < len(body) and body[j].startswith("|") == body[i].startswith("|"):
            j += 1
        chunk = body[i:j]
        table = _table(chunk) if body[i].startswith("|") else None
        if table is not None:
            blocks.append({"table": table})
        elif blocks and "text" in blocks[-1]:
            blocks[-1]["text"] += "\n" + "\n".join(chunk)
        else:
            blocks.append({"text": "\n".join(chunk)})
        i = j
    return {"title": title, "blocks": blocks}


def report_of(record: dict[str, Any]) -> str:
    """The report a record's ``title`` and ``blocks`` make (the inverse of :func:`blocks_of`)."""
    lines = [f"# {record['title']}"] if record.get("title") is not None else []
    for block in record["blocks"]:
        lines.extend(_table_lines(block["table"]) if "table" in block else block["text"].split("\n"))
    return "\n".join(lines) + "\n"


def save_study(
    json_path: str | Path,
    report_path: str | Path,
    markdown: str,
    command: str,
    data: Any = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Keep a measuring run's report as its record (the header, the report's blocks and the raw ``data`` it was
    made from), then write the report from that record, as ``--report-only`` does."""
    record = {**header(command, device), **blocks_of(markdown)}
    if data is not None:
        record["data"] = data
    write_record(json_path, record, sort_keys=False)
    write_report(report_path, report_of(record))
    return record


def rewrite_report(json_path: str | Path, report_path: str | Path) -> None:
    """``--report-only`` of a study whose report is made of its record's blocks."""
    write_report(report_path, report_of(read_record(json_path)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Write a report from its record: a JSON record that carries its blocks (the report: same name, "
        ".md), or a folder of `pdevision bench` (its results.md from its results.json)."
    )
    p.add_argument("records", nargs="+", type=Path, help="JSON records or `pdevision bench` folders")
    args = p.parse_args(argv)
    for path in args.records:
        if path.is_dir():
            write_report(path / "results.md", markdown_table(read_record(path / "results.json")))
            continue
        record = read_record(path)
        if "blocks" not in record:
            p.error(f"{path} holds no report blocks: its study's own script writes its report (--report-only)")
        rewrite_report(path, path.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
