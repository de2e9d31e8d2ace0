"""PDE-ResNet through timm's model API: paper parameter counts, sizes, heads, features, the training guard."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

import pdevision  # noqa: F401
from pdevision.bench.flops import count_params
from pdevision.layers import EQUATIONS, BoundedActivation, HyperbolicBlock
from pdevision.models import list_models
from pdevision.models.pderesnet import PDEResNet


@pytest.fixture(scope="module")
def micro() -> PDEResNet:
    torch.manual_seed(0)
    return timm.create_model("pderesnet_micro", num_classes=7).eval()


def test_registered_in_timm() -> None:
    names = set(timm.list_models("pderesnet*"))
    assert {
        "pderesnet_micro",
        "pderesnet50",
        "pderesnet50_hardtanh",
        "pderesnet50_noshare",
        "pderesnet50_noshare_x6",
        "pderesnet50_eq7_noshare_x6",
    } <= names
    assert names <= set(list_models())


@pytest.mark.parametrize(
    ("name", "paper", "exact"),
    [
        ("pderesnet50", 8.61e6, 8_613_092),
        ("pderesnet50_noshare", 8.73e6, 8_732_324),
        ("pderesnet50_noshare_x6", 13.0e6, 12_975_268),
        ("pderesnet50_eq4", 5.70e6, 5_700_836),
        ("pderesnet50_eq5", 4.26e6, 4_270_436),
        ("pderesnet50_eq6", 5.61e6, 5_614_820),
        ("pderesnet50_eq7_noshare_x6", 13.0e6, 12_975_268),
    ],
)
def test_parameter_counts_match_the_paper(name: str, paper: float, exact: int) -> None:
    """Every Eq.(3)-(7) row of Table 1 (arXiv:2308.01621) at 100 classes, within 1%."""
    n = count_params(timm.create_model(name, num_classes=100))
    assert n == exact
    assert abs(n - paper) / paper < 0.01


def test_table1_rows_build_at_micro_scale() -> None:
    from pdevision.models.pderesnet import TABLE1_ROWS

    for row, args in TABLE1_ROWS.items():  # (every equation's forward and backward: test_every_equation_runs...)
        model = timm.create_model("pderesnet_micro", num_classes=4, table1_row=row)
        block = model.stages[1].blocks[0]
        assert (block.equation, block.shared, block.expansion, model.activation) == (
            args["equation"], args["shared"], args["expansion"], args["activation"]
        ), row  # fmt: skip
        assert model.get_classifier().out_features == 4
    with pytest.raises(ValueError, match="table1_row must be one of"):
        timm.create_model("pderesnet_micro", table1_row="eq8")


def test_library_variants_keep_names_that_claim_no_equation() -> None:
    for name, equation in (("pderesnet50_mix", "mix"), ("pderesnet50_mix_cons", "mix_cons")):
        assert timm.create_model(name).equation == equation
    assert timm.create_model("pderesnet50_coef_grad").equation == "coef_grad"


def test_paper_configurations() -> None:
    model = timm.create_model("pderesnet50")
    assert [len(s.blocks) for s in model.stages] == [3, 4, 6, 3]
    assert model.dims == [64, 128, 256, 512]
    first = model.stages[1].blocks[0]
    assert first.equation == "eq3" and first.expansion == 4 and first.shared and first.stride == 2
    assert first.deriv.weight.shape == (4, 1, 3, 3)  # one 4x1x3x3 bank for all channels
    assert isinstance(first.act, BoundedActivation) and first.act.kind == "softball"
    assert all(isinstance(b.act, nn.Identity) for s in model.stages for b in s.blocks[1:])  # once per stage
    relu = timm.create_model("pderesnet50_relu")
    assert all(isinstance(b.act, nn.ReLU) for s in relu.stages for b in s.blocks)
    x6 = timm.create_model("pderesnet50_eq7_noshare_x6")
    assert x6.stages[0].blocks[0].hidden == 6 * 64 and not x6.stages[0].blocks[0].shared
    assert x6.stages[0].blocks[0].equation == "eq7"


@pytest.mark.parametrize("equation", EQUATIONS)
def test_every_equation_runs_and_trains(equation: str) -> None:
    model = timm.create_model("pderesnet_micro", num_classes=3, equation=equation, zero_init_last=False)
    x = torch.randn(2, 3, 40, 36)
    model(x).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_create_model_arguments() -> None:
    model = timm.create_model("pderesnet_micro", num_classes=5, in_chans=1, drop_path_rate=0.2, expansion=6)
    assert model.stages[-1].blocks[-1].drop_path.drop_prob == pytest.approx(0.2)
    assert model.stages[0].blocks[0].hidden == 6 * 16
    assert model(torch.randn(2, 1, 64, 64)).shape == (2, 5)


def test_training_guard_names_the_first_bad_block() -> None:
    model = timm.create_model("pderesnet_micro", num_classes=4, check_finite=True).eval()
    x = torch.randn(2, 3, 64, 64)
    assert torch.isfinite(model(x)).all()
    with torch.no_grad():
        model.stages[2].blocks[1].mix.weight[0, 0] = float("inf")
    # the zero-initialised last BatchNorm would hide the inf: give it a scale
    with torch.no_grad():
        model.stages[2].blocks[1].norm.weight.fill_(1.0)
    with pytest.raises(FloatingPointError, match=r"first appeared in stages\.2\.blocks\.1 "):
        model(x)
    with pytest.raises(FloatingPointError, match=r"stages\.2\.blocks\.1"):
        model.forward_intermediates(x)
    model.check_finite = False
    assert not all(s.check_finite for s in model.stages)
    with torch.no_grad():
        assert not torch.isfinite(model(x)).all()  # without the guard, NaN flows silently
    guarded = timm.create_model("pderesnet_micro", check_finite=True)
    with pytest.raises(FloatingPointError, match="input images"):
        guarded(torch.full((1, 3, 32, 32), float("nan")))
    with torch.no_grad():
        guarded.stem.conv.weight[0, 0, 0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="first appeared in stem"):
        guarded(x)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="one entry per stage"):
        PDEResNet(dims=[8, 16], depths=(1, 1, 1))
    with pytest.raises(ValueError, match="equation must be one of"):
        PDEResNet(equation="eq2")
    with pytest.raises(ValueError, match="activation must be one of"):
        PDEResNet(activation="gelu")
    with pytest.raises(TypeError, match="unexpected arguments"):
        PDEResNet(dimz=8)


def test_fold_batchnorm_in_place_matches_eval() -> None:
    model = timm.create_model("pderesnet_micro", num_classes=4, zero_init_last=False)
    model(torch.randn(8, 3, 48, 48))  # train mode: BatchNorm running statistics move away from the init
    model.eval()
    x = torch.randn(3, 3, 48, 40)
    with torch.no_grad():
        ref = model(x)
        model.fold_batchnorm()
        out = model(x)
    assert model.folded
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert all(isinstance(b, HyperbolicBlock) for s in model.stages for b in s.blocks)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_named_variants_accept_overrides_of_their_preset() -> None:
    model = timm.create_model("pderesnet50_noshare", shared=True, num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in timm.create_model("pderesnet50", num_classes=10).parameters()
    )
