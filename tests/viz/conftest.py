"""Every figure a viz test saves is checked (tests/viz/figure_checks.py): a failing figure fails its test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.viz.figure_checks import record_saved_figures


@pytest.fixture(autouse=True)
def _checked_figures() -> Iterator[None]:
    with record_saved_figures() as saved:
        yield
    bad = [f"{fig.get_suptitle() or fig.axes[0].get_title()!r}: {p}" for fig, probs in saved for p in probs]
    assert not bad, "figure problems:\n" + "\n".join(bad[:20])
