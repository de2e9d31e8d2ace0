"""Sparsification over the weight symmetry: exact transforms, a lower objective, honest pruning numbers."""

from __future__ import annotations

import pytest
import torch

from pdevision.symmetry import (
    fold_batchnorm,
    fraction_below,
    is_member,
    one_by_one_weights,
    prune_small_weights,
    sparsify,
)
from tests.symmetry.test_transform import X64, _tiny


def test_sparsify_over_orthogonal_group_is_exact_and_lowers_the_objective() -> None:
    model = _tiny("mix_cons", "softball")
    result = sparsify(model, steps=40, lr=0.05, threshold=0.1, inputs=X64)
    assert result.groups == ["O"] * 4
    assert all(is_member(g, "O", tol=1e-9) for g in result.elements)
    assert result.objective_after < result.objective_before
    assert result.history[-1] < result.history[0]
    assert result.transform_error is not None and result.transform_error < 1e-8
    assert result.model.folded
    assert result.sparsity_before == pytest.approx(fraction_below(fold_batchnorm(model), 0.1))
    assert result.sparsity_after == pytest.approx(fraction_below(result.model, 0.1))
    assert 0.0 <= result.pruned_error_before and 0.0 <= result.pruned_error_after
    text = result.summary()
    assert "below 0.1 x RMS" in text and "after pruning" in text


def test_sparsify_gl_and_scalings() -> None:
    gl = sparsify(_tiny("mix", "none"), steps=10, lr=0.02, inputs=X64)
    assert gl.groups == ["GL"] * 4 and gl.transform_error < 1e-8
    assert gl.objective_after < gl.objective_before
    sub = sparsify(_tiny("mix", "none"), group="O", steps=5)
    assert sub.groups == ["O"] * 4
    scale = sparsify(_tiny("eq3", "relu"), steps=10, lr=0.05, inputs=X64)
    assert scale.groups == ["perm_scale"] * 4 and scale.transform_error < 1e-8
    assert all(is_member(g, "perm_scale") for g in scale.elements)


def test_sparsify_with_a_discrete_group_does_nothing() -> None:
    model = _tiny("eq3", "softball")  # signed permutations only: no continuous part to descend
    result = sparsify(model, steps=10, inputs=X64)
    assert result.groups == ["signed_perm"] * 4 and result.history == []
    assert all(torch.equal(g, torch.eye(g.shape[0], dtype=g.dtype)) for g in result.elements)
    assert result.sparsity_after == result.sparsity_before


def test_sparsify_rejects_a_group_that_does_not_act() -> None:
    with pytest.raises(ValueError, match="does not act"):
        sparsify(_tiny("mix_cons", "softball"), group="GL", steps=1)


def test_prune_small_weights() -> None:
    folded = fold_batchnorm(_tiny("mix_cons", "softball"))
    names = [n for n, _ in one_by_one_weights(folded)]
    assert "stages.0.blocks.0.coef.weight" in names and "stages.1.blocks.1.shortcut.weight" in names
    pruned, fraction = prune_small_weights(folded, threshold=0.5)
    assert fraction == pytest.approx(fraction_below(folded, 0.5)) and 0 < fraction < 1
    zeros = sum(int((w == 0).sum()) for _, w in one_by_one_weights(pruned))
    total = sum(w.numel() for _, w in one_by_one_weights(pruned))
    assert zeros / total == pytest.approx(fraction)
    assert fraction_below(folded, 0.5) == fraction  # the original is untouched
