"""Search the continuous weight symmetry for sparser 1x1 weights (the paper's "lossless pruning" proposal).

The 1x1 matrices of a folded PDE-ResNet (``W``, ``A``, ``S`` of every block) change with the basis of each
stage's stream while the function does not. :func:`sparsify` runs gradient descent over the identity
component of the acting group, parametrised by the exponential map (``g = exp(X)``: ``X`` general for GL(n),
skew-symmetric for O(n), diagonal for the positive scalings of the monomial groups; the discrete signed
permutations have nothing to descend), on a scale-invariant sparsity measure, the mean over matrices of
``|M|_1 / (|M|_F sqrt(numel M))``. It then reports the fraction of weights below a threshold (relative to
each matrix's RMS) before and after, and how far pruning them moves the logits.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from pdevision.symmetry.fold import fold_batchnorm
from pdevision.symmetry.groups import intersect, require_pderesnet, stage_dims, stage_groups
from pdevision.symmetry.transform import BlockMatrices, act_on_block, check_invariance, stream_blocks, transform

logger = logging.getLogger(__name__)

__all__ = ["SparsifyResult", "fraction_below", "one_by_one_weights", "prune_small_weights", "sparsify"]


def one_by_one_weights(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The 1x1 channel-mixing weights of every block, ``(name, (out, in, 1, 1) tensor)``: the coefficient conv
    ``W``, the mixing conv ``A`` and the shortcut ``S`` (a projection, or after folding a dense matrix)."""
    require_pderesnet(model)
    out = []
    for i, stage in enumerate(model.stages):
        for j, block in enumerate(stage.blocks):
            convs = [("coef", block.coef), ("mix", block.mix)]
            shortcut = getattr(block.shortcut, "conv", block.shortcut)
            if isinstance(shortcut, nn.Conv2d):
                convs.append(("shortcut", shortcut))
            out += [(f"stages.{i}.blocks.{j}.{name}.weight", conv.weight) for name, conv in convs]
    return out


def _check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (a multiple of the RMS), got {threshold!r}")


def _small(w: torch.Tensor, threshold: float) -> torch.Tensor:
    rms = w.double().square().mean().sqrt()
    return w.double().abs() < threshold * rms


def fraction_below(model: nn.Module, threshold: float = 0.1) -> float:
    """Fraction of all 1x1 weights whose magnitude is below ``threshold`` times their matrix's RMS."""
    _check_threshold(threshold)
    small = total = 0
    for _, w in one_by_one_weights(model):
        small += int(_small(w, threshold).sum())
        total += w.numel()
    return small / max(total, 1)


@torch.no_grad()
def prune_small_weights(model: nn.Module, threshold: float = 0.1) -> tuple[nn.Module, float]:
    """A copy of ``model`` with the 1x1 weights below ``threshold`` x (their matrix's RMS) set to zero, and the
    fraction of 1x1 weights zeroed."""
    pruned = copy.deepcopy(model)
    fraction = fraction_below(pruned, threshold)
    for _, w in one_by_one_weights(pruned):
        w.masked_fill_(_small(w, threshold), 0.0)
    return pruned, fraction


@dataclass
class SparsifyResult:
    """What :func:`sparsify` found. Errors are relative logit differences against the unpruned model."""

    model: nn.Module
    elements: list[torch.Tensor]
    groups: list[str]
    threshold: float
    sparsity_before: float
    sparsity_after: float
    objective_before: float
    objective_after: float
    transform_error: float | None = None
    pruned_error_before: float | None = None
    pruned_error_after: float | None = None
    history: list[float] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"groups per stage: {', '.join(self.groups)}",
            f"1x1 weights below {self.threshold} x RMS: {self.sparsity_before:.2%} -> {self.sparsity_after:.2%}",
            f"sparsity objective (mean l1 / (l2 sqrt(n))): {self.objective_before:.4f} -> {self.objective_after:.4f}",
        ]
        if self.transform_error is not None:
            lines += [
                f"logit difference of the transformed model (unpruned): {self.transform_error:.2e}",
                f"logit difference after pruning: original {self.pruned_error_before:.2e}, "
                f"transformed {self.pruned_error_after:.2e}",
            ]
        return "\n".join(lines)


class _Search(nn.Module):
    """Generators of the identity component of each stage's group."""

    def __init__(self, dims: Sequence[int], groups: Sequence[str]) -> None:
        super().__init__()
        self.groups = list(groups)
        self.gens = nn.ParameterList(
            nn.Parameter(torch.zeros(n, n, dtype=torch.float64))
            if g in ("GL", "O")
            else nn.Parameter(torch.zeros(n, dtype=torch.float64))
            if g in ("monomial", "perm_scale")
            else nn.Parameter(torch.zeros(0, dtype=torch.float64))
            for n, g in zip(dims, groups, strict=True)
        )
        self.dims = list(dims)

    def elements(self) -> list[tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]]:
        """``(g, g^-1, monomial parts or None)`` per stage."""
        out = []
        for n, g, x in zip(self.dims, self.groups, self.gens, strict=True):
            if g == "GL":
                out.append((torch.linalg.matrix_exp(x), torch.linalg.matrix_exp(-x), None))
            elif g == "O":
                q = torch.linalg.matrix_exp(x - x.T)
                out.append((q, q.T, None))
            elif g in ("monomial", "perm_scale"):
                d = torch.exp(x)
                out.append((torch.diag(d), torch.diag(1.0 / d), (torch.arange(n), d)))
            else:
                eye = torch.eye(n, dtype=torch.float64)
                out.append((eye, eye, (torch.arange(n), torch.ones(n, dtype=torch.float64))))
        return out


def _objective(blocks: list, mats: list[BlockMatrices], elements: list) -> torch.Tensor:
    total, count = 0.0, 0
    for (block, src, dst), m in zip(blocks, mats, strict=True):
        g_in, g_in_inv, mono = (None, None, None) if src is None else elements[src]
        tm = act_on_block(block, m, g_in, g_in_inv, elements[dst][0], mono)
        for mat in (tm.W, tm.A, tm.S):
            total = total + mat.abs().sum() / (mat.norm() * math.sqrt(mat.numel())).clamp_min(1e-300)
            count += 1
    return total / count


def sparsify(
    model: nn.Module,
    group: str | None = None,
    steps: int = 300,
    lr: float = 0.02,
    threshold: float = 0.1,
    inputs: torch.Tensor | None = None,
) -> SparsifyResult:
    """Gradient descent over the weight symmetry of a PDE-ResNet towards sparser 1x1 weights.

    Args:
        model: a PDE-ResNet (folded or not; not modified).
        group: search this subgroup of the acting group (e.g. ``"O"`` where GL(n) acts); default: the acting
            group of each stage (:func:`pdevision.symmetry.stage_groups`).
        steps, lr: Adam on the generators (float64), starting from the identity.
        threshold: a weight counts as small below ``threshold`` times its matrix's RMS.
        inputs: a batch to measure logit differences on (transform, and pruning before / after).

    Returns:
        :class:`SparsifyResult`; ``result.model`` is the transformed, folded, unpruned model (exactly the same
        function), ``prune_small_weights(result.model, threshold)`` prunes it.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive number of optimiser steps, got {steps!r}")
    _check_threshold(threshold)
    acting = stage_groups(model)
    groups = acting if group is None else [intersect(group, a) for a in acting]
    if group is not None and any(g != group for g in groups):
        raise ValueError(f"{group} does not act on this model; the acting groups are {acting}")
    folded = fold_batchnorm(model)
    blocks = stream_blocks(folded)
    with torch.no_grad():  # the search runs on the CPU in float64, whatever the model's device
        mats = [BlockMatrices.of(b).to("cpu") for b, _, _ in blocks]
    search = _Search(stage_dims(folded), groups)
    params = [p for p in search.gens if p.numel()]
    history: list[float] = []
    with torch.no_grad():
        objective_before = float(_objective(blocks, mats, search.elements()))
    if params:
        opt = torch.optim.Adam(params, lr=lr)
        for step in range(steps):
            opt.zero_grad()
            loss = _objective(blocks, mats, search.elements())
            loss.backward()
            opt.step()
            history.append(float(loss.detach()))
            if step % 50 == 0 or step == steps - 1:
                logger.info("sparsify step %d/%d: objective %.5f", step + 1, steps, history[-1])
    with torch.no_grad():
        elements = [e[0].detach() for e in search.elements()]
        objective_after = float(_objective(blocks, mats, search.elements()))
    transformed = transform(folded, elements)
    result = SparsifyResult(
        model=transformed,
        elements=elements,
        groups=groups,
        threshold=threshold,
        sparsity_before=fraction_below(folded, threshold),
        sparsity_after=fraction_below(transformed, threshold),
        objective_before=objective_before,
        objective_after=objective_after,
        history=history,
    )
    if inputs is not None:
        result.transform_error = check_invariance(folded, transformed, inputs)
        result.pruned_error_before = check_invariance(folded, prune_small_weights(folded, threshold)[0], inputs)
        result.pruned_error_after = check_invariance(folded, prune_small_weights(transformed, threshold)[0], inputs)
    logger.info("sparsify:\n%s", result.summary())
    return result
