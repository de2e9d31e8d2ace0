"""The figures the library draws, checked from their matplotlib objects (tests/viz/figure_checks.py, run on every
saved figure by the conftest): colour bars where colour carries a value, text of 8 pt or more, no tick labels
running into each other or the next panel, legends inside; whole-number ticks where they count epochs or
indices. Fake inputs: no model runs here (the model figures are checked in the tests that make them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import AxesImage

from pdevision.bench.compare import plot_results
from pdevision.engine.loop import _plot_curves
from pdevision.tasks.classify.evaluate import _plot_confusion
from pdevision.tasks.pretrain.figures import save_reconstruction_grid
from pdevision.viz.erf import ErfResult, plot_erf
from pdevision.viz.gradcam import plot_cams
from tests.viz.figure_checks import figure_problems, record_saved_figures

LONG_CLASSES = [f"a rather long class name {i}" for i in range(10)]


def _integer_ticks(axis) -> bool:
    ticks = [t.get_loc() for t in axis._update_ticks() if t.label1.get_text()]
    return bool(ticks) and all(float(v).is_integer() for v in ticks)


def _one(saved: list) -> object:
    assert len(saved) == 1
    fig, problems = saved[0]
    assert problems == []
    return fig


def test_gradcam_figure(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    stages = [f"stages.{i}" for i in range(4)]
    result = {
        "targets": [1, 2],
        "top_probs": [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]],
        "top_classes": [[1, 0, 3], [2, 1, 0]],
        "maps": {s: rng.random((2, 32, 32)) for s in stages},
    }
    with record_saved_figures() as saved:
        plot_cams(rng.random((2, 32, 32, 3)), result, LONG_CLASSES, tmp_path / "cam.png", ["true: 1", "true: 2"])
    fig = _one(saved)
    assert any(getattr(ax, "_colorbar", None) is not None for ax in fig.axes)


def test_erf_figure(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    maps = [rng.random((16, 16)) for _ in range(4)]
    shares = [{"area_50": 0.1, "area_95": 0.5}] * 4
    res = ErfResult("vheat_micro", [f"stages.{i}" for i in range(4)], maps, "random init", shares, [(1.0, 1.0)] * 4)
    with record_saved_figures() as saved:
        plot_erf([res, res], tmp_path / "erf.png")
    shown = [im.get_array() for im in _one(saved).findobj(AxesImage)]
    expected = [np.log10(np.maximum(m / m.max(), 1e-4)) for m in maps] * 2  # one row per result, a column a stage
    assert len(shown) == 8 and all(np.allclose(s, e) for s, e in zip(shown, expected, strict=True))


@pytest.mark.parametrize("classes", [[str(i) for i in range(10)], LONG_CLASSES, [f"c{i}" for i in range(40)]])
def test_confusion_matrix(tmp_path: Path, classes: list[str]) -> None:
    rng = np.random.default_rng(0)
    with record_saved_figures() as saved:
        _plot_confusion(rng.integers(0, 50, (len(classes), len(classes))), classes, tmp_path / "cm.png")
    fig = _one(saved)
    ax = fig.axes[0]
    assert len(fig.axes) == 2 and getattr(fig.axes[1], "_colorbar", None) is not None  # the colour bar
    assert _integer_ticks(ax.xaxis) and _integer_ticks(ax.yaxis)
    assert all(t.get_fontsize() >= 8 for t in ax.get_xticklabels() + ax.texts)


@pytest.mark.parametrize("epochs", [1, 3, 7])
def test_training_curves(tmp_path: Path, epochs: int) -> None:
    history = [
        {"epoch": e, "train_loss": 2.0 / e, "val_loss": 2.1 / e, "train_top1": 10.0 * e, "val_top1": 11.0 * e}
        for e in range(1, epochs + 1)
    ]
    with record_saved_figures() as saved:
        _plot_curves(history, "top1", tmp_path / "curves.png")
    fig = _one(saved)
    for ax in fig.axes:
        assert ax.get_ylabel() and ax.get_xlabel() == "epoch"
        assert _integer_ticks(ax.xaxis), [t.get_loc() for t in ax.xaxis._update_ticks()]
        assert ax.get_legend() is not None


def test_reconstruction_grid(tmp_path: Path) -> None:
    x = torch.rand(6, 2, 3, 16, 16) * 2 - 1  # a different picture in every panel
    panels = {
        m: {"visible": x[2 * i], "prediction": x[2 * i + 1], "target": x[4 + i]}
        for i, m in enumerate(("QB-Heat", "MAE"))
    }
    with record_saved_figures() as saved:
        save_reconstruction_grid(panels, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), tmp_path / "grid.png")
    fig = _one(saved)
    # columns: each method's visible input and prediction, then the first method's target; a row per image
    columns = [x[0], x[1], x[2], x[3], x[4]]
    rgb = [(c * 0.25 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy() for c in columns]
    shown = [np.asarray(ax.get_images()[0].get_array()) for ax in fig.axes if ax.get_images()]
    assert len(shown) == 10 and all(np.allclose(shown[r * 5 + c], rgb[c][r]) for r in range(2) for c in range(5))


def test_bench_plots(tmp_path: Path) -> None:
    rows = [
        {"model": m, "img_size": s, "infer_img_s": 100.0 / s, "peak_mem_mib": s * 2.0, "gmacs": s / 100}
        for m in ("vheat_tiny", "convnext_tiny", "swin_tiny_patch4_window7_224")
        for s in (224, 384, 512)
    ]
    ops = {"exponents": {"heat": 1.5, "attention": 2.0}, "rows": []}
    ops["rows"] = [
        {"operator": o, "tokens": t, "seconds": t**1.5 * 1e-8}
        for o in ops["exponents"]
        for t in (256, 1024, 4096, 16384)
    ]
    result = {"rows": rows, "machine": {"device": "cpu"}, "operators": ops}
    with record_saved_figures() as saved:
        plot_results(result, tmp_path)
    assert len(saved) == 2 and [p for _, p in saved] == [[], []]
    for ax in saved[0][0].axes:
        assert ax.get_ylabel()


def test_the_checks_can_fail() -> None:
    """A figure with the faults the checks look for: each one is reported."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(3, 2))
    axes[0].imshow(np.random.default_rng(0).random((4, 4)))  # no colour bar
    axes[0].set_title("small", fontsize=5)
    axes[1].plot(range(3), label="outside")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    axes[1].set_yticks([0, 1, 2], ["a very long tick label", "another long tick label", "x"])
    problems = "\n".join(figure_problems(fig))
    plt.close(fig)
    for what in ("at 5 pt", "has no colour bar", "runs into another panel", "legend is clipped"):
        assert what in problems, problems


@pytest.mark.slow
def test_vheat_figures_of_a_one_pixel_stage(tmp_path: Path) -> None:
    """At 32 px the last stage of vheat_micro is 1x1: its decay map and radial profile keep whole-number index
    ticks and a readable frequency axis (checked on every saved figure)."""
    from pdevision.viz.common import create_named_model
    from pdevision.viz.heat import vheat_heat

    with record_saved_figures() as saved:
        vheat_heat(create_named_model("vheat_micro", 32), tmp_path, times=(1.0,))
    assert len(saved) == 4 and all(problems == [] for _, problems in saved), [p for _, p in saved]
    radial = next(fig for fig, _ in saved if "k(|w|)" in fig.axes[0].get_title())
    assert radial.axes[-1].get_xlim()[1] >= 0.5
