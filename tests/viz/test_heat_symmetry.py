"""Heat figures and the symmetry figure: their numbers, not only their files."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from pdevision.cli import main
from pdevision.viz import heat_figures, symmetry_figures
from pdevision.viz.common import VizError, create_named_model, model_transform, photo_images
from pdevision.viz.heat import pderesnet_point_response, point_source, vheat_diffusivity
from tests.helpers import randomise_bn_and_kernels


@contextmanager
def saved_figures() -> Iterator[dict[str, Figure]]:
    """The figures saved inside the block, by file name without its suffix."""
    by_file: dict[str, Figure] = {}
    original = Figure.savefig

    def savefig(self: Figure, fname: Path, *args: Any, **kwargs: Any) -> Any:
        by_file[Path(fname).stem] = self
        return original(self, fname, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", savefig)
        yield by_file


def _images(fig: Figure) -> list[np.ndarray]:
    return [np.asarray(im.get_array(), dtype=float) for ax in fig.axes for im in ax.get_images()]


def test_vheat_heat_figures_and_point_source_physics(tmp_path: Path) -> None:
    model = create_named_model("vheat_micro", 64)
    with saved_figures() as figures:
        numbers = heat_figures(model, None, tmp_path, times=(0.5, 1.0, 2.0, 4.0))
    assert set(figures) == {"vheat_diffusivity", "vheat_radial", "vheat_decay", "vheat_point_source"}
    # one diffusivity map per block, one decay map per stage, one point-source frame per stage and time
    assert len(_images(figures["vheat_diffusivity"])) == sum(model.depths)
    assert len(_images(figures["vheat_decay"])) == len(model.stages)
    assert len(_images(figures["vheat_point_source"])) == 4 * len(model.stages)
    stage = model.stages[0]
    (k,) = vheat_diffusivity(stage)[:1]
    assert k.shape == (16, 16, model.dims[0]) and (k >= 0).all()  # ReLU(Linear(FVE))
    frames = point_source(stage, (0.5, 1.0, 2.0, 4.0))
    for u in frames:
        assert u.sum() == pytest.approx(1.0, abs=1e-5)  # insulated walls keep the heat
    spreads = [numbers["stages"][0]["point_source_spread_px"][str(t)] for t in (0.5, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in itertools.pairwise(spreads))
    blocks = numbers["stages"][0]["blocks"]
    assert len(blocks) == len(stage.blocks) and 0 < blocks[0]["decay_mean"] <= 1


@pytest.mark.parametrize("name", ["hcnet_micro", "hcnet_library_micro"])
def test_hcnet_k_and_stencils_respect_the_maximum_principle(tmp_path: Path, name: str) -> None:
    """The authors' step (alpha in [0, 1], fixed mean stencil) and the library's stable parametrisation."""
    model = create_named_model(name, 32)
    images = photo_images(model_transform(model, 32), 3)[0]
    with saved_figures() as figures:
        numbers = heat_figures(model, images, tmp_path)
    assert len(numbers["layers"]) == sum(model.depths)
    # hcnet_k: one box per layer, its median line at the layer's median k; hcnet_stencils: a 3x3 stencil per layer
    medians = [line.get_ydata()[0] for line in figures["hcnet_k"].axes[0].lines if line.get_color() == "C1"]
    assert medians == pytest.approx([layer["k_quantiles_10_50_90"][1] for layer in numbers["layers"]])
    assert [im.shape for im in _images(figures["hcnet_stencils"])] == [(3, 3)] * sum(model.depths)
    for layer in numbers["layers"]:
        lo, _, hi = layer["k_quantiles_10_50_90"]
        assert 0 <= lo <= hi <= 1
        assert layer["w_min"] > 0 and layer["kW_max"] <= 1 + 1e-6  # discrete maximum principle


def test_pderesnet_point_response_stays_within_one_stencil(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = randomise_bn_and_kernels(create_named_model("pderesnet_micro", 64)).eval()
    images = photo_images(model_transform(model, 64), 2)[0]
    resp = pderesnet_point_response(model, images)
    assert len(resp) == sum(model.depths)
    # one Euler step: 3x3 derivatives, 1x1 matrices, point-wise products and activations
    assert all(r["support_radius"] is not None and r["support_radius"] <= 1 for r in resp)
    assert any(r["support_radius"] == 1 for r in resp)
    with saved_figures() as figures:
        numbers = heat_figures(model, images, tmp_path)
    assert [b["support_radius_px"] for b in numbers["blocks"]] == [r["support_radius"] for r in resp]
    # a crop of each block's response, scaled to its maximum
    crops = _images(figures["pderesnet_point_response"])
    assert len(crops) == len(resp) and all(c.max() == pytest.approx(1.0) for c in crops)


def test_heat_rejects_other_families(tmp_path: Path) -> None:
    with pytest.raises(VizError, match="vHeat, HcNet and PDE-ResNet"):
        heat_figures(create_named_model("resnet18", 32), torch.zeros(1, 3, 32, 32), tmp_path)


def test_heat_refuses_a_waveformer_clearly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A WaveFormer is a VHeat with a wave operator: it has no diffusivity to show (it used to fail inside)."""
    model = create_named_model("waveformer_micro", 32)
    with pytest.raises(VizError, match="vHeat, HcNet and PDE-ResNet models, got WaveFormer"):
        heat_figures(model, None, tmp_path / "fig")
    assert not (tmp_path / "fig").exists()
    assert main(["viz", "heat", "--model", "waveformer_micro", "--img-size", "32", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not 'waveformer_micro' (a wave operator, no heat diffusivity)" in err and err.count("\n") == 1


def test_symmetry_figure_logits_difference(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = randomise_bn_and_kernels(create_named_model("pderesnet_micro", 32, activation="none")).eval()
    images = photo_images(model_transform(model, 32), 4)[0]
    with saved_figures() as figures:
        numbers = symmetry_figures(model, images, tmp_path, steps=10)
    assert numbers["groups"] == ["monomial"] * 4
    diff = numbers["logits_rel_diff"]
    assert diff["group element"] < 1e-4 and diff["sparsify"] < 1e-4
    # the weights did move while the function stayed
    assert numbers["shown_matrix_rel_change"]["group element"] > 0.1
    hist = numbers["histograms"]
    assert set(hist) == {"folded", "group element", "sparsify"}
    assert sum(hist["folded"]["counts"]) == sum(hist["group element"]["counts"])
    # the weights figure shows the matrix the numbers measure: folded, moved by the group element, sparsified
    folded, moved, _ = _images(figures["symmetry_weights"])
    change = np.linalg.norm(moved - folded) / np.linalg.norm(folded)
    assert change == pytest.approx(numbers["shown_matrix_rel_change"]["group element"], rel=1e-6)
    drawn = [list(s.get_data().values) for s in figures["symmetry_histograms"].axes[0].patches]
    assert drawn == [hist[label]["counts"] for label in ("folded", "group element", "sparsify")]
    json.dumps(numbers)  # plain JSON


def test_symmetry_rejects_other_families(tmp_path: Path) -> None:
    with pytest.raises(VizError, match="PDE-ResNet"):
        symmetry_figures(create_named_model("vheat_micro", 32), torch.zeros(1, 3, 32, 32), tmp_path)
    assert not np.any([p.suffix == ".png" for p in tmp_path.iterdir()])
