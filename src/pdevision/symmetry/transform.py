"""Change the basis of each stage's residual stream and compensate in the weights: the same function with
other weights. Works on the folded model (:func:`pdevision.symmetry.fold_batchnorm`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from pdevision.layers.hyperbolic import BILINEAR_FORMS, MIXED_EQUATIONS, HyperbolicBlock
from pdevision.symmetry.fold import fold_batchnorm
from pdevision.symmetry.groups import GROUPS, is_member, monomial_parts, require_pderesnet, stage_dims, stage_groups


@dataclass
class BlockMatrices:
    """A folded block's linear pieces: ``W`` (coefficients, ``hidden x n_in``), ``A`` (``n_out x hidden``),
    ``S`` (shortcut, ``n_out x n_in``), ``c`` (bias, ``n_out``), ``K`` (derivative kernels as stored)."""

    W: torch.Tensor
    A: torch.Tensor
    S: torch.Tensor
    c: torch.Tensor
    K: torch.Tensor

    @classmethod
    def of(cls, block: HyperbolicBlock, dtype: torch.dtype = torch.float64) -> BlockMatrices:
        if not block.folded:
            raise ValueError("the block is not folded; use pdevision.symmetry.fold_batchnorm(model) first")
        if block.equation not in BILINEAR_FORMS:
            raise NotImplementedError(
                f"the weight transform is implemented for {BILINEAR_FORMS} (blocks act(S u + c + A h(u))), not for "
                f"{block.equation!r}; stage_groups() still names the group that acts on it"
            )
        return cls(
            block.coef.weight[:, :, 0, 0].to(dtype),
            block.mix.weight[:, :, 0, 0].to(dtype),
            block.shortcut.weight[:, :, 0, 0].to(dtype),
            block.mix.bias.to(dtype),
            block.deriv.weight.to(dtype),
        )

    def to(self, device: torch.device | str) -> BlockMatrices:
        return BlockMatrices(*(t.to(device) for t in (self.W, self.A, self.S, self.c, self.K)))

    @torch.no_grad()
    def write(self, block: HyperbolicBlock) -> None:
        dt = block.mix.weight.dtype
        block.coef.weight.copy_(self.W[:, :, None, None].to(dt))
        block.mix.weight.copy_(self.A[:, :, None, None].to(dt))
        block.mix.bias.copy_(self.c.to(dt))
        block.shortcut.weight.copy_(self.S[:, :, None, None].to(dt))
        block.deriv.weight.copy_(self.K.to(dt))


def act_on_block(
    block: HyperbolicBlock,
    m: BlockMatrices,
    g_in: torch.Tensor | None,
    g_in_inv: torch.Tensor | None,
    g_out: torch.Tensor,
    monomial: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> BlockMatrices:
    """The weights after ``u_in -> g_in u_in`` (``None``: unchanged input) and ``u_out -> g_out u_out``.

    ``S -> g_out S g_in^-1``, ``c -> g_out c``; the bilinear part: mix/mix_cons read the stream with ``W`` only,
    ``W -> W g_in^-1``, ``A -> g_out A``. In eq3/eq7/coef_grad the stream enters the product entry by entry, so
    ``g_in`` must be monomial, given as ``monomial = (pi, d)`` (``(g_in u)_i = d_i u_pi(i)``): hidden channel
    ``(i, a)`` takes the role of ``(pi(i), a)``, the rows of ``W g_in^-1`` are permuted and divided by ``d_i``,
    the columns of ``g_out A`` permuted, per-channel kernels permuted (a shared bank is unchanged). Without
    ``monomial`` a non-mixed block gets the mix rule, which is not a symmetry (used to show that a
    non-member changes the function). Differentiable in the group elements.
    """
    a = g_out @ m.A
    c = g_out @ m.c
    if g_in is None:
        return BlockMatrices(m.W, a, g_out @ m.S, c, m.K)
    s = g_out @ m.S @ g_in_inv
    w = m.W @ g_in_inv
    if block.equation in MIXED_EQUATIONS or monomial is None:
        return BlockMatrices(w, a, s, c, m.K)
    pi, d = monomial
    k = block.hidden // block.in_chs
    sigma = (pi[:, None] * k + torch.arange(k, device=pi.device)[None, :]).reshape(-1)
    w = w[sigma] / d.repeat_interleave(k)[:, None]
    kernels = m.K if block.deriv.shared else m.K[sigma]
    return BlockMatrices(w, a[:, sigma], s, c, kernels)


def stream_blocks(model: nn.Module) -> list[tuple[HyperbolicBlock, int | None, int]]:
    """Every block with the stage index of its input stream (``None``: the stem) and of its output stream."""
    require_pderesnet(model)
    out = []
    for i, stage in enumerate(model.stages):
        for j, block in enumerate(stage.blocks):
            out.append((block, (i - 1 if i > 0 else None) if j == 0 else i, i))
    return out


# Paper forms outside the bilinear setting for which the weight transform is written out (act_on_paper_block).
TRANSFORMABLE_PAPER_FORMS: tuple[str, ...] = ("eq4", "eq6")


def _hidden_permutation(pi: torch.Tensor, k: int) -> torch.Tensor:
    """Hidden channel ``(i, a)`` (index ``i k + a``) takes the role of ``(pi(i), a)``."""
    return (pi[:, None] * k + torch.arange(k, device=pi.device)[None, :]).reshape(-1)


@torch.no_grad()
def act_on_paper_block(block: HyperbolicBlock, g_in: torch.Tensor | None, g_out: torch.Tensor) -> None:
    """Rewrite a folded eq4 / eq6 block (in place, float64 algebra) for ``u_in -> g_in u_in`` (``None``: unchanged)
    and ``u_out -> g_out u_out``; exact when ``g_in`` (and for eq4 ``g_out``) is monomial.

    eq6, ``A K[u * (C u)] + S u``: the product is entry-wise in the input channel, so with ``(g_in u)_i = d_i
    u_pi(i)``: ``C[i] -> (C g_in^-1)[pi(i)] / d_i``, ``A``'s columns and per-channel kernels permuted, ``A -> g_out
    A``. eq4, ``(C u) * (A K u + e) + S u``: entry-wise in the output channel, so with ``(g_out v)_i = d'_i
    v_pi'(i)``: ``C -> d' P' C g_in^-1``, ``A -> P' A[:, sigma] / d``, ``e -> P' e``. Both: ``S -> g_out S g_in^-1``,
    shortcut bias ``-> g_out b``. A non-monomial element is applied through its largest entries (which changes the
    function: used to show that non-members are not symmetries).
    """
    dt = block.mix.weight.dtype
    c = block.coef.weight[:, :, 0, 0].double()
    a = block.mix.weight[:, :, 0, 0].double()
    e = block.mix.bias.double()
    s = block.shortcut.weight[:, :, 0, 0].double()
    b = block.shortcut.bias.double()
    kernels = block.deriv.weight
    k = block.expansion
    g_out = g_out.double()
    if g_in is not None:
        g_in = g_in.double()
        g_inv = torch.linalg.inv(g_in)
        pi, d = monomial_parts(g_in)
        sigma = _hidden_permutation(pi, k)
        s = s @ g_inv
        if not block.deriv.shared:
            kernels = kernels[sigma]
        if block.equation == "eq6":
            c = (c @ g_inv)[pi] / d[:, None]
            a = a[:, sigma]
        else:  # eq4
            c = c @ g_inv
            a = a[:, sigma] / d.repeat_interleave(k)[None, :]
    if block.equation == "eq6":
        a, e = g_out @ a, g_out @ e
    else:
        pi_o, d_o = monomial_parts(g_out)
        c, a, e = d_o[:, None] * c[pi_o], a[pi_o], e[pi_o]
    block.coef.weight.copy_(c[:, :, None, None].to(dt))
    block.mix.weight.copy_(a[:, :, None, None].to(dt))
    block.mix.bias.copy_(e.to(dt))
    block.shortcut.weight.copy_((g_out @ s)[:, :, None, None].to(dt))
    block.shortcut.bias.copy_((g_out @ b).to(dt))
    block.deriv.weight.copy_(kernels)


@torch.no_grad()
def transform(model: nn.Module, elements: Sequence[torch.Tensor | None], check: bool = True) -> nn.Module:
    """A folded eval-mode copy of the PDE-ResNet ``model`` whose stage ``i`` stream is ``g_i`` times the
    original's (``elements[i] = g_i``, ``None`` for the identity), weights compensated so that the logits are
    unchanged. The stem and the head compensate the first and last stream (``fc -> fc g^-1``).

    With ``check`` (default), an element outside the group that acts on its stage (:func:`stage_groups`)
    raises ``ValueError``; with ``check=False`` it is applied anyway (the function then changes). The algebra
    runs in float64; the copy keeps ``model``'s dtype.
    """
    dims = stage_dims(model)
    if len(elements) != len(dims):
        raise ValueError(f"need one element per stage ({len(dims)}), got {len(elements)}")
    if model.equation not in BILINEAR_FORMS + TRANSFORMABLE_PAPER_FORMS:
        raise NotImplementedError(
            f"the weight transform is implemented for equation in {BILINEAR_FORMS + TRANSFORMABLE_PAPER_FORMS}, "
            f"not {model.equation!r} "
            f"(stage_groups() names the group that acts on it: {stage_groups(model)[0]})"
        )
    groups = stage_groups(model)
    gs: list[torch.Tensor] = []
    for i, (g, n) in enumerate(zip(elements, dims, strict=True)):
        g = torch.eye(n, dtype=torch.float64) if g is None else torch.as_tensor(g).detach().double().cpu()
        if g.shape != (n, n):
            raise ValueError(f"stage {i}: expected a {n}x{n} matrix, got shape {tuple(g.shape)}")
        if check and not is_member(g, groups[i], tol=1e-5):
            raise ValueError(
                f"stage {i}: the element is not in {groups[i]} ({GROUPS[groups[i]]}), the group that acts on "
                f"the residual streams of this model (equation={model.equation!r}, activation="
                f"{model.activation!r}); pass check=False to apply it anyway"
            )
        gs.append(g)
    inverses = [torch.linalg.inv(g) for g in gs]
    out = copy.deepcopy(model).eval() if getattr(model, "folded", False) else fold_batchnorm(model)
    device = next(out.parameters()).device
    for block, src, dst in stream_blocks(out):
        if block.equation in TRANSFORMABLE_PAPER_FORMS:
            act_on_paper_block(block, None if src is None else gs[src].to(device), gs[dst].to(device))
            continue
        m = BlockMatrices.of(block)
        g_in = None if src is None else gs[src].to(device)
        g_in_inv = None if src is None else inverses[src].to(device)
        mono = None
        if g_in is not None and block.equation not in MIXED_EQUATIONS and is_member(g_in, "monomial", tol=1e-5):
            mono = monomial_parts(g_in)
        act_on_block(block, m, g_in, g_in_inv, gs[dst].to(device), mono).write(block)
    fc = out.head.fc
    if isinstance(fc, nn.Linear):
        fc.weight.copy_((fc.weight.double() @ inverses[-1].to(device)).to(fc.weight.dtype))
    return out


@torch.no_grad()
def check_invariance(a: nn.Module, b: nn.Module, inputs: torch.Tensor) -> float:
    """Relative difference ``|a(x) - b(x)| / |a(x)|`` (Frobenius norms over the batch) of two models' outputs,
    both run in eval mode (their modes are restored)."""
    modes = a.training, b.training
    a.eval()
    b.eval()
    try:
        ya = a(inputs.to(next(a.parameters()).dtype))
        yb = b(inputs.to(next(b.parameters()).dtype))
    finally:
        a.train(modes[0])
        b.train(modes[1])
    return float((ya.double() - yb.double()).norm() / ya.double().norm().clamp_min(1e-300))
