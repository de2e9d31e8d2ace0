"""Each family page says what of its paper is reproduced here and what is not, and the figures it quotes there are
its records' (the README's rule: every figure beside a record is in that record, however the sentence is worded)."""

from __future__ import annotations

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
