"""The README: its Python example runs as written, its links lead to files, Install comes on the first screen, no
paragraph is a wall of figures, and every figure it quotes beside a record is that record's, however it is worded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# a figure of prose: a number not glued to a word (``ResNet-50``, ``ImageNet-1K`` and ``vheat_tiny`` hold none), with
# its unit when it is a ratio or a percentage
FIGURE = re.compile(r"(?<![\w.\-])-?\d+(?:\.\d+)?(?:x(?!\w)|%)?")
# a number of a record, ranges such as ``(1.79-1.93)`` split into their ends; a ratio keeps its ``x``
RECORD_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?:x(?![a-z]))?")
RESULT = re.compile(r"-?\d+(?:\.\d+)?(?:x|%| dB)")  # the one figure of a result cell
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """``text`` without code blocks, code spans and link targets: what a reader reads as figures."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return LINK.sub("]", re.sub(r"`[^`]*`", "", text))


def figures(text: str) -> list[str]:
    return FIGURE.findall(prose(text))


def blocks(text: str) -> list[str]:
    """The README's paragraphs, with each table row a block of its own; code blocks left out."""
    text = re.sub(r"^```.*?^```\n", "", text, flags=re.S | re.M)
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.strip().splitlines()
        if lines and all(line.startswith("|") for line in lines):
            out += lines
        elif lines:
            out.append("\n".join(lines))
    return out


def records(block: str, page: Path = README) -> list[Path]:
    """The records a block of ``page`` links to: files under ``benchmarks/``."""
    paths = [(page.parent / link.split("#")[0]).resolve() for link in LINK.findall(block) if "://" not in link]
    text = (".md", ".json", ".csv")
    return [p for p in paths if p.is_file() and p.suffix in text and p.is_relative_to(ROOT / "benchmarks")]


def number(figure: str) -> str:
    """A README figure as a record writes it: a ratio keeps its ``x``; a percentage or a unit is dropped."""
    return re.sub(r"(%| dB)$", "", figure)


def unknown_figures(block: str, page: Path = README) -> list[str]:
    """The figures of ``block`` (of ``page``) that none of the records it links holds."""
    held = {n for path in records(block, page) for n in RECORD_NUMBER.findall(path.read_text())}
    held |= {n.rstrip("x") for n in held}  # a plain number may be a ratio's
    return [f for f in figures(block) if number(f).lstrip("-") not in held]


def result_rows(text: str) -> list[list[str]]:
    """The rows ``what | figure | record`` of the README's table of recorded results."""
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in blocks(text) if line.startswith("|")]
    return [row for row in rows if len(row) == 3 and RESULT.fullmatch(row[1]) and records(row[2])]


def result_holds(row: list[str], figure: str | None = None) -> bool:
    """Whether the row's figure (or ``figure`` in its place) is on a line of its record that also names every code
    span of the row's description (the models a ratio compares), in a table column whose header's figure (such as
    ``224 px``) the row quotes too: a figure is tied to its row and column, not only to its record."""
    what, quoted, link = row
    wanted = number(figure or quoted)
    names = re.findall(r"`([^`]+)`", what)
    for path in records(link):
        header: list[str] = []
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if not cells:
                header = []
                continue
            if not header:
                header = cells
            if not all(name in line for name in names):
                continue
            for i, cell in enumerate(cells):
                column = figures(header[i]) if i < len(header) and header is not cells else []
                if wanted in RECORD_NUMBER.findall(cell) and set(column) <= set(figures(what)):
                    return True
        text_lines = [line for line in path.read_text().splitlines() if not line.startswith("|")]
        if any(wanted in RECORD_NUMBER.findall(line) and all(n in line for n in names) for line in text_lines):
            return True
    return False


def neighbours(figure: str) -> list[str]:
    """``figure`` with its last digit moved by one either way (``1.80x`` -> ``1.79x``, ``1.81x``)."""
    match = re.match(r"(-?\d+(?:\.\d+)?)(.*)", figure)
    assert match
    value, unit = match.groups()
    step = 10 ** -len(value.split(".")[1]) if "." in value else 1
    decimals = len(value.split(".")[1]) if "." in value else 0
    return [f"{float(value) + d * step:.{decimals}f}{unit}" for d in (-1, 1)]


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}  # as a script: timm's register_model needs a module
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert tuple(namespace["logits"].shape) == (2, 10)
    assert "torch.Size([2, 10])" in capsys.readouterr().out


def test_readme_relative_links_lead_to_files() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in relative)
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_install_is_on_the_first_screen_and_no_paragraph_is_a_wall_of_figures() -> None:
    text = README.read_text()
    headings = [i for i, line in enumerate(text.splitlines(), 1) if line.startswith("## ")]
    install = [i for i in headings if "install" in text.splitlines()[i - 1].lower()]
    assert install and install[0] <= 40, install
    crowded = [(len(figures(b)), b[:60]) for b in blocks(text) if len(figures(b)) > 10]
    assert not crowded, crowded


def test_every_figure_beside_a_record_is_in_that_record() -> None:
    """Each paragraph or table row that links a record under ``benchmarks/`` quotes only figures that record holds;
    each recorded result's figure is on the record's line that names the row's models."""
    text = README.read_text()
    linked = [b for b in blocks(text) if records(b)]
    assert len(linked) >= 5
    assert [(b[:60], unknown_figures(b)) for b in linked if unknown_figures(b)] == []
    rows = result_rows(text)
    assert len(rows) >= 5
    assert [row[1] for row in rows if not result_holds(row)] == []


def test_a_moved_figure_would_be_seen() -> None:
    """The check above can fail for every result the README quotes: the figure with its last digit moved by one is
    not on its record's line; and an altered README fails it."""
    rows = result_rows(README.read_text())
    assert [(row[1], n) for row in rows for n in neighbours(row[1]) if result_holds(row, n)] == []
    assert neighbours("1.80x") == ["1.79x", "1.81x"] and neighbours("64.5%") == ["64.4%", "64.6%"]
    row = rows[0]
    altered = README.read_text().replace(f"| {row[1]} |", f"| {neighbours(row[1])[1]} |", 1)
    assert [r[1] for r in result_rows(altered) if not result_holds(r)] == [neighbours(row[1])[1]]
    assert unknown_figures("a typed figure, 97.31% ([r](benchmarks/bench_cpu_perf/results.md))") == ["97.31%"]


def test_figures_are_read_as_a_reader_reads_them() -> None:
    assert figures("ResNet-50 (25.5M, 4.1 GMACs) at 224 px: 1.36x, `vheat_tiny` [a](b/c2.md) ImageNet-1K") == [
        "25.5",
        "4.1",
        "224",
        "1.36x",
    ]
    assert RECORD_NUMBER.findall("| 1.80x (1.79-1.93) | 6.6e-07 |") == ["1.80x", "1.79", "1.93", "6.6", "07"]
