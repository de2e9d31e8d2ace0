"""Heat figures and the symmetry figure: their numbers, not only their files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pdevision.cli import main
from pdevision.viz import heat_figures, symmetry_figures
from pdevision.viz.common import VizError, create_named_model, model_transform, photo_images
from pdevision.viz.heat import pderesnet_point_response, point_source, vheat_diffusivity
from tests.helpers import randomise_bn_and_kernels


def test_vheat_heat_figures_and_point_source_physics(tmp_path: Path) -> None:
    model = create_named_model("vheat_micro", 64)
    numbers = heat_figures(model, None, tmp_path, times=(0.5, 1.0, 2.0, 4.0))
    for name in ("vheat_diffusivity", "vheat_radial", "vheat_decay", "vheat_point_source"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
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
    numbers = heat_figures(model, images, tmp_path)
    assert (tmp_path / "hcnet_k.png").exists() and (tmp_path / "hcnet_stencils.png").exists()
    assert len(numbers["layers"]) == sum(model.depths)
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
    numbers = heat_figures(model, images, tmp_path)
    assert (tmp_path / "pderesnet_point_response.png").exists()
    assert [b["support_radius_px"] for b in numbers["blocks"]] == [r["support_radius"] for r in resp]


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
    numbers = symmetry_figures(model, images, tmp_path, steps=10)
    assert numbers["groups"] == ["monomial"] * 4
    diff = numbers["logits_rel_diff"]
    assert diff["group element"] < 1e-4 and diff["sparsify"] < 1e-4
    # the weights did move while the function stayed
    assert numbers["shown_matrix_rel_change"]["group element"] > 0.1
    assert (tmp_path / "symmetry_weights.png").exists() and (tmp_path / "symmetry_histograms.png").exists()
    hist = numbers["histograms"]
    assert set(hist) == {"folded", "group element", "sparsify"}
    assert sum(hist["folded"]["counts"]) == sum(hist["group element"]["counts"])
    json.dumps(numbers)  # plain JSON


def test_symmetry_rejects_other_families(tmp_path: Path) -> None:
    with pytest.raises(VizError, match="PDE-ResNet"):
        symmetry_figures(create_named_model("vheat_micro", 32), torch.zeros(1, 3, 32, 32), tmp_path)
    assert not np.any([p.suffix == ".png" for p in tmp_path.iterdir()])
