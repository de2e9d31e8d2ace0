"""Checks on saved matplotlib figures, read from the figure objects: legible text, a colour bar for every image
whose colour carries a value, no tick labels running into each other or into another panel, legends inside the
figure. :func:`record_saved_figures` runs them on every figure saved while a test runs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.text import Text

MIN_POINTS = 8


def _tick_labels(ax: Any) -> list[Text]:
    """The tick labels drawn on ``ax`` (ticks inside the view, non-empty, visible)."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        if not axis.get_visible() or not ax.axison:
            continue
        for tick in axis._update_ticks():  # the ticks matplotlib draws (inside the view limits)
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text().strip():
                    out.append(label)
    return out


def _overlap(a: Any, b: Any, tol: float = 0.5) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > tol and min(a.y1, b.y1) - max(a.y0, b.y0) > tol


def figure_problems(fig: Figure) -> list[str]:
    """What is wrong with ``fig``, one line each (empty when nothing is)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    problems = []
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_POINTS:
            if t.get_window_extent(r).width > 0:
                problems.append(f"text {t.get_text()[:30]!r} at {t.get_fontsize():g} pt (< {MIN_POINTS})")
    bars = [ax._colorbar for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]
    keys = {(b.mappable.get_cmap().name, tuple(round(v, 9) for v in b.mappable.get_clim())) for b in bars}
    for im in fig.findobj(AxesImage):
        if im.get_array() is not None and im.get_array().ndim == 2:  # scalar data: the colour carries a value
            key = (im.get_cmap().name, tuple(round(v, 9) for v in im.get_clim()))
            if key not in keys:
                problems.append(f"an image with colour map {key[0]} and limits {key[1]} has no colour bar")
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    labels = {id(ax): _tick_labels(ax) for ax in axes}
    boxes = {id(ax): [lab.get_window_extent(r) for lab in labels[id(ax)]] for ax in axes}
    for ax in axes:
        for (i, a), (j, b) in itertools.combinations(enumerate(boxes[id(ax)]), 2):
            if _overlap(a, b):
                texts = labels[id(ax)][i].get_text(), labels[id(ax)][j].get_text()
                problems.append(f"tick labels {texts} overlap in one panel")
    for a, b in itertools.permutations(axes, 2):
        area = b.get_window_extent(r)
        for lab, box in zip(labels[id(a)], boxes[id(a)], strict=True):
            if _overlap(box, area) or any(_overlap(box, other) for other in boxes[id(b)]):
                problems.append(f"tick label {lab.get_text()!r} runs into another panel")
                break
    for ax in axes:  # an axis that counts (indices, epochs) has whole-number ticks
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            if label == "epoch" or label.endswith((" index", "input channel", "output channel")):
                locs = [t.get_loc() for t in axis._update_ticks() if t.label1.get_text()]
                if any(not float(v).is_integer() for v in locs):
                    problems.append(f"axis {label!r} counts, but has ticks {locs}")
    for legend in fig.findobj(matplotlib.legend.Legend):
        box = legend.get_window_extent(r)
        if not fig.bbox.contains(box.x0, box.y0) or not fig.bbox.contains(box.x1, box.y1):
            problems.append("a legend is clipped by the figure's edge")
    return problems


@contextmanager
def record_saved_figures() -> Iterator[list[tuple[Figure, list[str]]]]:
    """Every figure saved inside the block, with its problems (checked as it is saved)."""
    saved: list[tuple[Figure, list[str]]] = []
    original = Figure.savefig

    def savefig(self: Figure, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        saved.append((self, figure_problems(self)))
        return result

    Figure.savefig = savefig  # type: ignore[method-assign]
    try:
        yield saved
    finally:
        Figure.savefig = original  # type: ignore[method-assign]
