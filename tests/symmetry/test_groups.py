"""Group names, membership, random elements, and which group acts on which variant."""

from __future__ import annotations

import pytest
import torch

from pdevision.layers import ACTIVATIONS, EQUATIONS
from pdevision.models.pderesnet import PDEResNet
from pdevision.symmetry import (
    GROUPS,
    intersect,
    is_member,
    monomial_parts,
    random_element,
    random_group_element,
    stage_groups,
)

# The claim of pdevision.symmetry's docstring: (equation kind, stage activation) -> group on every stream.
CLAIMED = {
    ("mixed", "none"): "GL",
    ("mixed", "hardball"): "O",
    ("mixed", "softball"): "O",
    ("mixed", "hardtanh"): "signed_perm",
    ("mixed", "relu"): "perm_scale",
    ("mixed", "relu@all"): "perm_scale",
    ("entrywise", "none"): "monomial",
    ("entrywise", "hardball"): "signed_perm",
    ("entrywise", "softball"): "signed_perm",
    ("entrywise", "hardtanh"): "signed_perm",
    ("entrywise", "relu"): "perm_scale",
    ("entrywise", "relu@all"): "perm_scale",
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_random_elements_are_members_with_bounded_condition(group: str) -> None:
    for seed in range(3):
        g = random_group_element(7, group, seed=seed, cond=10.0)
        assert g.dtype == torch.float64 and g.shape == (7, 7)
        assert is_member(g, group)
        cond = float(torch.linalg.cond(g))
        assert cond <= 10.0 + 1e-9
        if group == "GL":
            assert cond == pytest.approx(10.0)
            assert not is_member(g, "O") and not is_member(g, "monomial")
    assert not torch.equal(random_group_element(5, group, seed=0), random_group_element(5, group, seed=1)) or (
        group == "perm"
    )


def test_membership_rejects_the_next_group_up() -> None:
    o = random_group_element(6, "O", seed=3)
    assert is_member(o, "GL") and not is_member(o, "signed_perm")
    sp = random_group_element(6, "signed_perm", seed=3)
    assert is_member(sp, "O") and is_member(sp, "monomial") and not is_member(sp, "perm_scale")
    ps = random_group_element(6, "perm_scale", seed=3)
    assert is_member(ps, "monomial") and not is_member(ps, "O") and not is_member(ps, "signed_perm")
    assert not is_member(torch.ones(3, 4), "GL")
    assert not is_member(torch.zeros(3, 3), "GL")
    with pytest.raises(ValueError, match="group must be one of"):
        is_member(o, "SO")


def test_monomial_parts() -> None:
    g = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, -0.5], [3.0, 0.0, 0.0]])
    pi, d = monomial_parts(g)
    assert pi.tolist() == [1, 2, 0] and d.tolist() == [2.0, -0.5, 3.0]
    u = torch.randn(3)
    torch.testing.assert_close(g @ u, d * u[pi])


def test_intersections() -> None:
    assert intersect("O", "monomial") == "signed_perm"
    assert intersect("GL", "perm_scale") == "perm_scale"
    assert intersect("monomial", "perm_scale") == "perm_scale"
    assert intersect("O", "perm_scale") == "perm"
    assert intersect("GL", "GL") == "GL"


@pytest.mark.parametrize("equation", EQUATIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_stage_groups_table(equation: str, activation: str) -> None:
    model = PDEResNet(depths=(1, 1), dims=(4, 6), equation=equation, activation=activation)
    kind = "mixed" if equation in ("mix", "mix_cons") else "entrywise"
    assert stage_groups(model) == [CLAIMED[(kind, activation)]] * 2
    # weight sharing does not change the group
    per_channel = PDEResNet(depths=(1, 1), dims=(4, 6), equation=equation, activation=activation, shared=False)
    assert stage_groups(per_channel) == stage_groups(model)
    elements = random_element(model, seed=2)
    assert [g.shape for g in elements] == [(4, 4), (6, 6)]
    assert all(is_member(g, CLAIMED[(kind, activation)]) for g in elements)


def test_random_element_with_explicit_groups() -> None:
    model = PDEResNet(depths=(1, 1), dims=(4, 6))
    assert all(is_member(g, "GL") and not is_member(g, "O") for g in random_element(model, "GL", seed=1))
    els = random_element(model, ["O", "perm"], seed=1)
    assert is_member(els[0], "O") and is_member(els[1], "perm")
    with pytest.raises(ValueError, match="one group per stage"):
        random_element(model, ["O"])


def test_random_group_element_refuses_what_is_not_an_element() -> None:
    for cond in (float("nan"), float("inf"), 0.5):  # nan gave a matrix of nan, inf one of nan and inf
        with pytest.raises(ValueError, match="cond must be a finite number of at least 1"):
            random_group_element(3, "GL", cond=cond)
    with pytest.raises(TypeError, match=r"floating-point dtype, got torch\.int64"):  # it was truncated to integers
        random_group_element(3, "GL", cond=10.0, dtype=torch.int64)
    for n in (-1, 0, 3.5):
        with pytest.raises(ValueError, match="n must be a positive number of channels"):
            random_group_element(n, "GL")  # type: ignore[arg-type]


def test_the_symmetry_tools_name_a_model_that_is_not_a_pde_resnet() -> None:
    import timm

    from pdevision import symmetry

    vheat = timm.create_model("vheat_micro", num_classes=3)
    calls = [
        lambda: symmetry.stage_groups(vheat),
        lambda: symmetry.stage_dims(vheat),
        lambda: symmetry.random_element(vheat),
        lambda: symmetry.transform(vheat, [None] * 4),
        lambda: symmetry.fraction_below(vheat),
        lambda: symmetry.prune_small_weights(vheat),
        lambda: symmetry.sparsify(vheat, steps=1),
    ]
    for call in calls:  # each used to fail inside with an AttributeError on a vHeat block
        with pytest.raises(TypeError, match="VHeat is not a PDE-ResNet"):
            call()


def test_sparsify_and_pruning_refuse_meaningless_settings() -> None:
    import timm

    from pdevision import symmetry

    model = timm.create_model("pderesnet_micro", num_classes=3)
    for steps in (0, -5, 2.5):  # 0 and -5 used to return the model as "sparsified"
        with pytest.raises(ValueError, match="steps must be a positive number"):
            symmetry.sparsify(model, steps=steps)  # type: ignore[arg-type]
    for threshold in (float("nan"), -1.0, float("inf")):  # they used to report 0.0 pruned
        with pytest.raises(ValueError, match="threshold must be a finite number >= 0"):
            symmetry.prune_small_weights(model, threshold)
