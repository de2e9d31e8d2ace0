"""Each family page says what of its paper is reproduced here and what is not, and the figures it quotes there are
its records' (the README's rule: every figure beside a record is in that record, however the sentence is worded)."""

from __future__ import annotations

import re

import pytest

from tests.test_readme import ROOT, blocks, records, unknown_figures

PAGES = ["vheat.md", "hcnet.md", "waveformer.md", "pderesnet.md"]
LEAD = "**What is reproduced here"  # the paragraph's bold lead, as a heading would be


@pytest.mark.parametrize("name", PAGES)
def test_the_page_says_what_is_reproduced_with_its_records_figures(name: str) -> None:
    page = ROOT / "docs" / name
    said = [b for b in blocks(page.read_text()) if b.startswith(LEAD)]
    assert len(said) == 1, name
    assert "Not reproduced" in said[0] and "Reproduced" in said[0], name
    assert unknown_figures(said[0], page) == [], name
    if name in ("vheat.md", "pderesnet.md"):  # the two that quote figures
        assert records(said[0], page), name


def test_a_typed_figure_is_seen() -> None:
    page = ROOT / "docs" / "vheat.md"
    block = "vHeat-T does 59.3 GMACs at 768 px ([r](../benchmarks/bench_cpu_perf/results.md))"
    assert unknown_figures(block, page) == ["59.3"]
    assert unknown_figures(block.replace("59.3", "59.2"), page) == []


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the first markdown table whose header row starts with ``header``."""
    lines = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]


def test_the_speed_pages_ratio_table_is_the_records_row_by_row() -> None:
    """docs/speed.md's table of inference ratios names what each ratio compares (a peer as shipped, or on the same
    kernels; PDE-ResNet-50's and ResNet-50's sizes); with those notes taken off, each row is the record's row, and
    the sizes it quotes are the record's."""
    record_path = ROOT / "benchmarks" / "bench_cpu_perf_avx512" / "results.md"
    record = {tuple(r[:3]): r[3:] for r in _rows(record_path.read_text(), "| model | vs | dtype | 224 px")}
    page = (ROOT / "docs" / "speed.md").read_text()
    rows = _rows(page, "| model | vs | dtype | 224 px")
    assert len(rows) >= 10
    notes = []
    for row in rows:
        notes += [n for cell in row[:2] for n in re.findall(r"\(([^)]*)\)", cell)]
        model, peer = (re.sub(r" \(.*\)$", "", cell) for cell in row[:2])
        peer = peer.replace("swin_tiny", "swin_tiny_patch4_window7_224")
        assert record.get((model, peer, row[2])) == row[3:], row
    assert {"as shipped", "same kernels"} <= set(notes)
    sizes = [n for n in notes if "GMACs" in n]
    assert sizes and all(unknown_figures(f"{n} ([r](results.md))", record_path) == [] for n in sizes)
