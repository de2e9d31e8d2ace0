"""Matrix groups acting on the channels of PDE-ResNet's residual streams: which one acts on a model, membership,
random elements. Matrices act on column vectors of channels, ``u -> g u`` (NCHW: on dimension 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from pdevision.layers.hyperbolic import EQUATIONS, MIXED_EQUATIONS

GROUPS: dict[str, str] = {
    "GL": "all invertible matrices",
    "O": "orthogonal matrices",
    "monomial": "permutations times invertible diagonal matrices",
    "perm_scale": "permutations times positive diagonal matrices",
    "signed_perm": "permutations times diagonal matrices of +-1",
    "perm": "permutation matrices",
}

# The group each stage activation commutes with (entry-wise clip: signed permutations; radial maps: O(n);
# ReLU: positive scalings and permutations).
ACTIVATION_GROUP: dict[str, str] = {
    "none": "GL",
    "hardball": "O",
    "softball": "O",
    "hardtanh": "signed_perm",
    "relu": "perm_scale",
    "relu@all": "perm_scale",
}

# Subgroup relation: each group and every group that contains it.
_SUPERGROUPS: dict[str, set[str]] = {
    "GL": {"GL"},
    "O": {"O", "GL"},
    "monomial": {"monomial", "GL"},
    "perm_scale": {"perm_scale", "monomial", "GL"},
    "signed_perm": {"signed_perm", "O", "monomial", "GL"},
    "perm": {"perm", "signed_perm", "perm_scale", "O", "monomial", "GL"},
}


def _check_group(group: str) -> None:
    if group not in GROUPS:
        raise ValueError(f"group must be one of {list(GROUPS)}, got {group!r}")


def intersect(a: str, b: str) -> str:
    """The intersection of two of :data:`GROUPS` (the lattice is closed under it)."""
    _check_group(a)
    _check_group(b)
    # subgroups of both; the lattice is closed, so the largest one (fewest supergroups) contains the others
    common = [g for g in GROUPS if a in _SUPERGROUPS[g] and b in _SUPERGROUPS[g]]
    return min(common, key=lambda g: len(_SUPERGROUPS[g]))


def form_group(equation: str) -> str:
    """The group the blocks of an equation admit on their stream: GL(n) when the stream is read by 1x1 convs
    only (the library's ``mix``, ``mix_cons``), monomial matrices when it enters a product entry by entry (the
    paper's Eqs. (3)-(7) and ``coef_grad``; see :mod:`pdevision.symmetry`)."""
    if equation not in EQUATIONS:
        raise ValueError(f"equation must be one of {EQUATIONS}, got {equation!r}")
    return "GL" if equation in MIXED_EQUATIONS else "monomial"


def require_pderesnet(model: nn.Module) -> None:
    """A ``TypeError`` unless ``model`` is a PDE-ResNet (the symmetry tools read its equation, activation and
    blocks); without it another model failed deep inside with an ``AttributeError``."""
    if not all(hasattr(model, name) for name in ("equation", "activation", "stages")):
        raise TypeError(f"{type(model).__name__} is not a PDE-ResNet: the symmetry tools act on pderesnet models")


def stage_groups(model: nn.Module) -> list[str]:
    """The group acting on each stage's residual stream of a PDE-ResNet (the same for every stage)."""
    require_pderesnet(model)
    group = intersect(form_group(model.equation), ACTIVATION_GROUP[model.activation])
    return [group] * len(model.stages)


def stage_dims(model: nn.Module) -> list[int]:
    """Channels of each stage's residual stream."""
    require_pderesnet(model)
    return [stage.blocks[0].out_chs for stage in model.stages]


def monomial_parts(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pi, d)`` with ``(g u)_i = d_i u_{pi(i)}`` for a monomial matrix ``g``."""
    pi = g.abs().argmax(dim=1)
    return pi, g.gather(1, pi[:, None])[:, 0]


def is_member(g: torch.Tensor, group: str, tol: float = 1e-6) -> bool:
    """Whether the square matrix ``g`` lies in ``group`` (entries relative to ``max |g|`` within ``tol``)."""
    _check_group(group)
    if g.ndim != 2 or g.shape[0] != g.shape[1] or not bool(torch.isfinite(g).all()):
        return False
    g = g.double()
    n = g.shape[0]
    eye = torch.eye(n, dtype=g.dtype, device=g.device)
    if group == "GL":
        return bool(torch.linalg.cond(g) < 1.0 / tol)
    if group == "O":
        return bool((g @ g.T - eye).abs().max() <= tol)
    scale = g.abs().max()
    big = g.abs() > tol * scale
    if not (bool((big.sum(0) == 1).all()) and bool((big.sum(1) == 1).all())):
        return False
    if bool((g.abs() * ~big).max() > tol * scale):
        return False
    _, d = monomial_parts(g)
    if group == "monomial":
        return True
    if group == "perm_scale":
        return bool((d > 0).all())
    if group == "signed_perm":
        return bool(((d.abs() - 1).abs() <= tol).all())
    return bool(((d - 1).abs() <= tol).all())  # perm


def _haar_orthogonal(n: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))[None, :]).to(dtype)


def random_group_element(
    n: int, group: str, seed: int = 0, cond: float = 10.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A random ``n x n`` element of ``group`` with condition number at most ``cond``.

    GL: ``U diag(s) V^T`` with Haar-random orthogonal ``U, V`` and singular values log-uniform in ``[1, cond]``,
    the extremes included (condition number exactly ``cond`` for ``n >= 2``). O: Haar-random. The monomial
    groups: a uniform permutation times scalings log-uniform in ``[cond^-1/2, cond^1/2]`` (random signs where
    the group has them)."""
    _check_group(group)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive number of channels, got {n!r}")
    if not math.isfinite(cond) or cond < 1:  # a nan passed "cond < 1" and gave a matrix of nan
        raise ValueError(f"cond must be a finite number of at least 1, got {cond}")
    if not dtype.is_floating_point:  # an integer dtype truncated the element to another matrix
        raise TypeError(f"a group element needs a floating-point dtype, got {dtype}")
    gen = torch.Generator().manual_seed(seed)
    if group == "O":
        return _haar_orthogonal(n, gen, dtype)
    if group == "GL":
        u, v = _haar_orthogonal(n, gen, torch.float64), _haar_orthogonal(n, gen, torch.float64)
        s = torch.exp(torch.rand(n, generator=gen, dtype=torch.float64) * math.log(cond))
        if n >= 2:
            s[0], s[-1] = 1.0, cond
        return (u @ torch.diag(s) @ v.T).to(dtype)
    pi = torch.randperm(n, generator=gen)
    if group in ("monomial", "perm_scale"):
        d = torch.exp((torch.rand(n, generator=gen, dtype=torch.float64) - 0.5) * math.log(cond))
    else:
        d = torch.ones(n, dtype=torch.float64)
    if group in ("monomial", "signed_perm"):
        d = d * (torch.randint(0, 2, (n,), generator=gen) * 2 - 1)
    g = torch.zeros(n, n, dtype=torch.float64)
    g[torch.arange(n), pi] = d
    return g.to(dtype)


def random_element(
    model: nn.Module,
    group: str | Sequence[str] | None = None,
    seed: int = 0,
    cond: float = 10.0,
    dtype: torch.dtype = torch.float64,
) -> list[torch.Tensor]:
    """One random element per stage of a PDE-ResNet: of the group that acts (default, :func:`stage_groups`)
    or of ``group`` (a name, or one per stage). Condition numbers at most ``cond``."""
    dims = stage_dims(model)
    groups = stage_groups(model) if group is None else [group] * len(dims) if isinstance(group, str) else list(group)
    if len(groups) != len(dims):
        raise ValueError(f"need one group per stage ({len(dims)}), got {len(groups)}")
    pairs = enumerate(zip(dims, groups, strict=True))
    return [random_group_element(n, g, seed * 1000 + i, cond, dtype) for i, (n, g) in pairs]
