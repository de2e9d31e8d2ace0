"""Folding and the weight symmetry: transformed models compute the same logits; non-members do not."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

import pdevision  # noqa: F401
from pdevision.layers import ACTIVATIONS, BILINEAR_FORMS, EQUATIONS
from pdevision.models.pderesnet import PDEResNet
from pdevision.symmetry import (
    check_invariance,
    fold_batchnorm,
    is_member,
    random_element,
    stage_groups,
    transform,
)
from tests.helpers import randomise_bn_and_kernels

MIXED = ("mix", "mix_cons")


def _randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    return randomise_bn_and_kernels(model, seed, kernel_scale=0.5).eval()


def _tiny(equation: str = "eq3", activation: str = "softball", shared: bool = True, dtype=torch.float64):
    torch.manual_seed(0)
    model = PDEResNet(
        depths=(1, 2, 1, 1), dims=(8, 12, 16, 20), equation=equation, activation=activation, shared=shared,
        num_classes=5,
    )  # fmt: skip
    return _randomise(model.to(dtype))


X64 = torch.randn(2, 3, 33, 37, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2


@pytest.mark.parametrize("equation", EQUATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fold_batchnorm_matches_eval_model(equation: str, dtype: torch.dtype) -> None:
    model = _tiny(equation, dtype=dtype)
    folded = fold_batchnorm(model)
    assert folded.folded and not model.folded
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert check_invariance(model, folded, X64) < 1e-5


@pytest.mark.parametrize("equation", BILINEAR_FORMS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shared", [True, False])
def test_group_elements_leave_logits_unchanged(equation: str, activation: str, shared: bool) -> None:
    model = _tiny(equation, activation, shared)
    group = stage_groups(model)[0]
    elements = random_element(model, seed=3, cond=10.0)
    assert all(is_member(g, group) for g in elements)
    twin = transform(model, elements)
    assert check_invariance(model, twin, X64) < 1e-4
    # the weights did change
    a0 = fold_batchnorm(model).stages[2].blocks[0].mix.weight
    a1 = twin.stages[2].blocks[0].mix.weight
    assert (a0 - a1).abs().max() > 1e-3
    if not shared and equation not in MIXED:  # per-channel kernels move with the channels
        k0 = model.stages[1].blocks[1].deriv.weight
        assert not torch.allclose(k0, twin.stages[1].blocks[1].deriv.weight)


@pytest.mark.parametrize("equation", ["eq4", "eq6"])
@pytest.mark.parametrize("activation", ["none", "softball", "relu@all"])
@pytest.mark.parametrize("shared", [True, False])
def test_paper_eq4_eq6_symmetries(equation: str, activation: str, shared: bool) -> None:
    """Eq. (4) is entry-wise in the output channel, Eq. (6) in the input channel: monomial matrices act
    (continuous scalings without activation), a dense element does not."""
    model = _tiny(equation, activation, shared)
    group = stage_groups(model)[0]
    assert group == {"none": "monomial", "softball": "signed_perm", "relu@all": "perm_scale"}[activation]
    twin = transform(model, random_element(model, seed=3, cond=10.0))
    assert check_invariance(model, twin, X64) < 1e-4
    a0, a1 = fold_batchnorm(model).stages[2].blocks[0].coef.weight, twin.stages[2].blocks[0].coef.weight
    assert (a0 - a1).abs().max() > 1e-3
    dense = transform(model, random_element(model, "GL", seed=3), check=False)
    assert check_invariance(model, dense, X64) > 1e-2


def test_transform_of_eq5_is_refused() -> None:
    model = _tiny("eq5", "none")
    assert stage_groups(model) == ["monomial"] * 4
    with pytest.raises(NotImplementedError, match="names the group"):
        transform(model, random_element(model, seed=1))


@pytest.mark.parametrize(
    ("equation", "activation"), [("mix_cons", "softball"), ("eq3", "softball"), ("coef_grad", "relu@all")]
)
def test_float32_invariance_on_micro(equation: str, activation: str) -> None:
    torch.manual_seed(0)
    model = _randomise(timm.create_model("pderesnet_micro", num_classes=10, equation=equation, activation=activation))
    x = torch.randn(4, 3, 64, 64)
    twin = transform(model, random_element(model, seed=5, dtype=torch.float32))
    assert twin.stages[0].blocks[0].mix.weight.dtype == torch.float32
    assert check_invariance(model, twin, x) < 1e-3


def test_float32_invariance_gl() -> None:
    # Without activations the quadratic blocks grow fast (the paper's NaNs); the tiny model stays finite.
    model = _tiny("mix", "none", dtype=torch.float32)
    twin = transform(model, random_element(model, seed=5, dtype=torch.float32))
    assert check_invariance(model, twin, X64.float()) < 1e-3


# (equation, activation, a group that is strictly larger than the acting one)
NON_MEMBERS = [
    ("mix_cons", "softball", "GL"),
    ("mix", "hardball", "GL"),
    ("mix_cons", "hardtanh", "O"),
    ("mix", "relu", "signed_perm"),
    ("eq3", "none", "O"),
    ("eq7", "none", "GL"),
    ("eq3", "softball", "O"),
    ("coef_grad", "softball", "perm_scale"),
    ("eq3", "hardtanh", "O"),
    ("eq7", "hardtanh", "perm_scale"),
    ("coef_grad", "relu@all", "signed_perm"),
]


@pytest.mark.parametrize(("equation", "activation", "group"), NON_MEMBERS)
def test_non_members_change_the_logits(equation: str, activation: str, group: str) -> None:
    model = _tiny(equation, activation)
    elements = random_element(model, group, seed=4)
    assert not all(is_member(g, stage_groups(model)[0]) for g in elements)
    with pytest.raises(ValueError, match="is not in"):
        transform(model, elements)
    twin = transform(model, elements, check=False)
    assert check_invariance(model, twin, X64) > 1e-2


def test_transform_leaves_the_original_and_moves_the_features() -> None:
    model = _tiny("mix_cons", "softball")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    twin = transform(model, random_element(model, seed=0))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with torch.no_grad():
        f0 = model.forward_head(model.forward_features(X64), pre_logits=True)
        f1 = twin.forward_head(twin.forward_features(X64), pre_logits=True)
    assert (f0 - f1).abs().max() > 1e-2  # the stream's basis changed, the logits did not
    assert check_invariance(model, twin, X64) < 1e-4
    # transforming again (an already folded model) composes
    twice = transform(twin, random_element(model, seed=1))
    assert check_invariance(model, twice, X64) < 1e-4


def test_transform_argument_errors_and_modes() -> None:
    model = _tiny("mix_cons", "none")
    with pytest.raises(ValueError, match="one element per stage"):
        transform(model, [None])
    with pytest.raises(ValueError, match="expected a 8x8 matrix"):
        transform(model, [torch.eye(3), None, None, None])
    identity = transform(model, [None] * 4)
    assert check_invariance(model, identity, X64) < 1e-10
    model.train()
    check_invariance(model, identity, X64)
    assert model.training and not identity.training
