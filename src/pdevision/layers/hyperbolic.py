"""Quasi-linear hyperbolic blocks of PDE-ResNet (Liu et al., "A Novel Convolutional Neural Network
Architecture with a Continuous Symmetry", arXiv:2308.01621), with their stem and activations.

All tensors are NCHW. ``u`` is the block input (``n`` channels, the residual stream), ``k`` the expansion
factor (4 in the paper, 6 for "x6"), ``K_a`` the 3x3 derivative kernels (trainable, initialised to the stencils
of ``d/dx``, ``d/dy``, ``d2/dx2``, ``d2/dy2``, ``d2/dxdy`` and a smoothing kernel; ``a = 1..k``), ``*`` the
element-wise product. As the paper describes its Fig. 1 (Sec. 5.1), the 2 derivatives of Eq. (3) become ``k``
trainable kernels per channel (a depthwise conv, "or better, 4"), the matrices ``C, D`` are one stacked 1x1 conv
(here ``coef``) and ``A, B`` another (``mix``), with a BatchNorm after the 3x3 and one at the end. One
forward-Euler step is ``u_out = act(shortcut(u) + BN(r(u)))``.

Each equation is one small class (:class:`Equation`; the table :data:`EQUATION_FORMS` maps its name to it) that
says what its ``coef`` and ``deriv`` are, computes its branch ``h(u)`` and residual ``r(u)`` from the block's
modules, and folds its BatchNorms; :class:`HyperbolicBlock` holds the modules and computes
``act(shortcut(u) + BN(r(u)))``.

**The paper's equations** (arXiv:2308.01621, Eqs. 3-7; ``a`` generalises the printed ``x, y`` to ``k`` kernels):

====== ============================================================ =================================================
 name   printed equation                                              block ``r(u)``
====== ============================================================ =================================================
 eq3    ``sum_j A_ij (C u)_j du_j/dx + B (D u) du/dy``                 ``A [(C_a u) * BN(K_a u)]``, ``C_a`` n -> k n
 eq4    ``(C u)_i (A du/dx)_i + (D u)_i (B du/dy)_i``                  ``(C u) * A BN(K_a u)``, ``C`` n -> n_out
 eq5    ``(C u)_i du_i/dx + (D u)_i du_i/dy``                          ``sum_a (C_a u) * BN(K_a u)``, no ``A``
 eq6    ``sum_j A_ij d/dx[u_j (C u)_j] + B d/dy[u (C u)]`` (one C)     ``A BN(K_a [u * (C u)])``, ``C`` n -> n
 eq7    ``sum_j A_ij d/dx[u_j (C u)_j] + B d/dy[u (D u)]``             ``A BN(K_a [u * (C_a u)])``, ``C_a`` n -> k n
====== ============================================================ =================================================

What the paper leaves open and what is chosen here (the choices reproduce Table 1's parameter counts at 100
classes within 1%, checked in the tests; designs with one coefficient matrix per kernel in Eq. (4) or a 2-kernel
bank do not: 8.96M and 4.60M against 5.70M):

- eq4: the printed equation has two coefficient matrices (``C`` for ``x``, ``D`` for ``y``); the count of Table 1
  (5.70M) is reached with one ``C`` (``n -> n_out``) shared by all ``k`` derivative channels and ``A`` (``k n ->
  n_out``) summing over them, i.e. ``(C u)_i sum_a (A_a K_a u)_i``.
- eq5: each ``u_i`` sees only its own derivatives, so the branch has ``n_in`` channels; the paper does not say
  how a block that changes the width (each stage's first block) handles this. Here the branch's ``n_in``
  channels (after their BatchNorm) are added to the first ``n_in`` of the ``n_out`` output channels (zero
  padding of the branch; the projection shortcut writes all of them). ``C_a`` are ``k`` matrices ``n -> n``
  (the printed ``C, D`` for ``k = 2``).
- eq6 prints one ``C`` for both directions: one ``C`` (``n -> n``) here; eq7 prints ``C`` and ``D``: one ``C_a``
  per kernel here. The product is formed at the input resolution and the (strided) derivative taken after it.
- In all of them the BatchNorm after the 3x3 and the final BatchNorm follow Sec. 5.1; the paper's code is
  not available, so the positions of the BatchNorms in Eqs. (4)-(7) are this library's reading.

**This library's channel-mix variants** (not equations of the paper; the symmetry toolkit uses them because
the residual stream is read only by 1x1 convs in ``mix`` and ``mix_cons``, so GL(n) can act; see
:mod:`pdevision.symmetry`):

=========== ============================================ ==================================================
 name        ``h`` fed to ``A`` (``r = A h``)              PDE reading
=========== ============================================ ==================================================
 mix         ``(D u) * BN(K_a (C u))``, ``a = x, y``       eq3 with the differentiated variable mixed, ``C u``
 mix_cons    ``BN(K_a ((C u) * (D u)))``, ``a = x, y``     conservative form of ``mix``, ``d/dx[(C u)(D u)]``
 coef_grad   ``u * BN(K_a (C_a u))``                       derivative of the coefficient, ``u d/dx (C u)``
=========== ============================================ ==================================================

Each has eq3's (and eq7's) parameter count: ``k n_in^2`` (``C``) + ``k n_in n_out`` (``A``) + the kernels (``k
n_in`` 3x3 kernels, or one shared bank of ``k`` (eq3, eq7, coef_grad) or 2 (mix, mix_cons) kernels with
``shared=True``). (Earlier versions of this library called eq7 "eq4", and mix, mix_cons, coef_grad "eq5",
"eq6", "eq7".)

In eval mode :meth:`HyperbolicBlock.fold_batchnorm` removes every BatchNorm (scales into the 1x1 convs,
shifts into biases or the shortcut); for eq3, eq7 and the library variants the folded block reads
``u_out = act(S u + c + A' h_raw)``, ``h_raw`` being ``h`` without its BatchNorm.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import ClassVar

import torch
import torch.nn.functional as F
from timm.layers import DropPath
from torch import Tensor, nn

from pdevision.ops.ball import hardball, hardtanh, softball

# FX leaves: the default radius reads a concrete channel count.
torch.fx.wrap("hardball")
torch.fx.wrap("softball")
ACTIVATIONS: tuple[str, ...] = ("none", "relu", "relu@all", "hardtanh", "hardball", "softball")

__all__ = [
    "ACTIVATIONS",
    "BILINEAR_FORMS",
    "EQUATIONS",
    "EQUATION_FORMS",
    "LIBRARY_VARIANTS",
    "MIXED_EQUATIONS",
    "PAPER_EQUATIONS",
    "BoundedActivation",
    "DerivativeConv",
    "Equation",
    "HyperbolicBlock",
    "ResNetStem",
    "create_activation",
    "derivative_stencils",
    "init_hyperbolic_weights",
]


def derivative_stencils(count: int) -> torch.Tensor:
    """``(count, 1, 3, 3)`` unit-norm stencils: Sobel ``d/dx``, ``d/dy``, then ``d2/dx2``, ``d2/dy2``, ``d2/dxdy``,
    a binomial smoother; beyond six, seeded random kernels."""
    smooth = torch.tensor([1.0, 2.0, 1.0])
    diff = torch.tensor([-1.0, 0.0, 1.0])
    second = torch.tensor([1.0, -2.0, 1.0])
    basis = [
        torch.outer(smooth, diff),  # d/dx (x = width, the last axis)
        torch.outer(diff, smooth),  # d/dy
        torch.outer(smooth, second),  # d2/dx2
        torch.outer(second, smooth),  # d2/dy2
        torch.outer(diff, diff),  # d2/dxdy
        torch.outer(smooth, smooth),  # smoothing (identity + Laplacian / 4)
    ]
    if count > len(basis):
        gen = torch.Generator().manual_seed(count)
        basis += list(torch.randn(count - len(basis), 3, 3, generator=gen))
    kernels = torch.stack(basis[:count])
    return (kernels / kernels.flatten(1).norm(dim=1)[:, None, None]).unsqueeze(1)


class DerivativeConv(nn.Module):
    """Depthwise 3x3 conv that splits each of ``channels`` input channels into ``splits`` outputs
    (output channel ``j * splits + a`` is kernel ``a`` of input ``j``). NCHW in and out, zero padding 1.

    ``shared=True``: one bank of ``bank`` kernels, output channel ``o`` uses kernel ``o % bank`` (the paper's
    weight sharing, e.g. a 4x1x3x3 bank for all channels); ``shared=False``: one kernel per output channel.
    """

    def __init__(self, channels: int, splits: int, bank: int, shared: bool = True, stride: int = 1) -> None:
        super().__init__()
        if (channels * splits) % bank:
            raise ValueError(f"{channels * splits} output channels are not a multiple of the bank size {bank}")
        self.channels, self.splits, self.bank, self.shared, self.stride = channels, splits, bank, shared, stride
        init = derivative_stencils(bank)
        if not shared:
            init = init.repeat(channels * splits // bank, 1, 1, 1)
        self.weight = nn.Parameter(init)

    def kernels(self) -> torch.Tensor:
        """The kernel of every output channel, ``(channels * splits, 1, 3, 3)``."""
        if self.shared:
            return self.weight.repeat(self.channels * self.splits // self.bank, 1, 1, 1)
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.kernels(), None, self.stride, 1, 1, self.channels)

    def extra_repr(self) -> str:
        return f"{self.channels}, splits={self.splits}, bank={self.bank}, shared={self.shared}, stride={self.stride}"


def _subsample(x: torch.Tensor, stride: int) -> torch.Tensor:
    """The pixels a 1x1 (or padded 3x3) conv of this stride is centred on."""
    return x[..., ::stride, ::stride] if stride > 1 else x


def _bn_affine(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BatchNorm as ``scale * x + shift``."""
    scale = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -bn.running_mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    return scale, shift


# -- the equations: what each builds and computes; the modules (coef, deriv, mix, norms) live in the block --------


class Equation:
    """The form of one equation in a :class:`HyperbolicBlock`: the shapes of its ``coef`` (``C``) and ``deriv``
    (``K_a``), its branch ``h(u)`` fed to ``A`` (``mix``) and its residual ``r(u)``, and how its BatchNorms fold.
    Stateless: every method reads the block's modules. NCHW throughout."""

    name: ClassVar[str]
    #: an equation printed in the paper (the others are this library's channel-mix variants)
    paper: ClassVar[bool] = False
    #: the folded block reads ``act(S u + c + A' h_raw(u))`` (the setting of :mod:`pdevision.symmetry.transform`)
    bilinear: ClassVar[bool] = True
    #: the residual stream enters only through 1x1 convs (GL(n) acts on it); needs an even expansion
    mixed: ClassVar[bool] = False
    #: ``coef`` is strided with the block (the product is formed at the output resolution)
    coef_strided: ClassVar[bool] = False
    #: the branch ends in the matrix ``A`` (``mix``); eq5 has none
    has_mix: ClassVar[bool] = True

    def check(self, in_chs: int, out_chs: int, expansion: int) -> None:
        """``ValueError`` for shapes this equation cannot take."""
        if expansion < 1 or (self.mixed and expansion % 2):
            raise ValueError(f"expansion must be a positive integer (even for {MIXED_EQUATIONS}), got {expansion}")

    def coef_out(self, block: HyperbolicBlock) -> int:
        """Output channels of ``coef``: the ``k`` stacked matrices ``C_a``, ``k n_in``."""
        return block.hidden

    def make_deriv(self, block: HyperbolicBlock) -> DerivativeConv:
        """The 3x3 kernels: one per channel of the ``k n_in`` products (a bank of ``k`` when shared)."""
        return DerivativeConv(block.hidden, 1, block.expansion, block.shared, block.stride)

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        """``h(u)``, the ``k n_in`` channels fed to ``A``, at the output resolution."""
        raise NotImplementedError

    def residual(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        """``r(u) = A h(u)``, before the final BatchNorm."""
        assert block.mix is not None
        return block.mix(self.branch(block, u))

    def shift_input(self, block: HyperbolicBlock) -> torch.Tensor | None:
        """The ``(k n_in, n_in)`` matrix of what the 3x3 BatchNorm's shift is multiplied by in ``h`` (a linear term
        in ``u`` after folding), ``None`` where the shift enters ``h`` as a constant."""
        return None

    def fold(self, block: HyperbolicBlock) -> None:
        """Fold the BatchNorms into ``act(S u + c + A' h_raw(u))``: scales into ``A'``, the 3x3 BatchNorm's shift
        into ``S`` (:meth:`shift_input`) or the bias ``c``."""
        assert block.mix is not None
        s1, b1 = _bn_affine(block.norm_deriv)
        s2, b2 = _bn_affine(block.norm)
        a = block.mix.weight[:, :, 0, 0]
        carried = self.shift_input(block)
        bias = b2 + s2 * (a @ b1) if carried is None else b2
        skip, skip_bias = block.shortcut_matrix()
        if carried is not None:
            skip = skip + (s2[:, None] * a * b1[None, :]) @ carried
        block.write_folded(s2[:, None] * a * s1[None, :], bias + skip_bias, skip, None)


class Eq3(Equation):
    """Eq. (3): ``r = A [(C_a u) * BN(K_a u)]``, ``sum_j A_ij (C u)_j du_j/dx + B (D u) du/dy``."""

    name, paper, coef_strided = "eq3", True, True

    def make_deriv(self, block: HyperbolicBlock) -> DerivativeConv:
        return DerivativeConv(block.in_chs, block.expansion, block.expansion, block.shared, block.stride)

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        return block.norm_deriv(block.deriv(u)) * block.coef(u)

    def shift_input(self, block: HyperbolicBlock) -> torch.Tensor:
        return block.coef.weight[:, :, 0, 0]  # the shift multiplies C u


class _PaperFoldForm(Eq3):
    """The paper's forms that keep their shape when folded (eq4, eq5, eq6): biases in ``mix`` and the shortcut.
    They differentiate ``u`` (or ``u * C u``) with Eq. (3)'s ``k`` kernels per input channel."""

    bilinear = False

    def fold(self, block: HyperbolicBlock) -> None:
        s1, b1 = _bn_affine(block.norm_deriv)
        s2, b2 = _bn_affine(block.norm)
        skip, skip_bias = block.shortcut_matrix()
        skip_bias = skip_bias.clone()
        skip_bias[: block.branch_chs] += b2
        self.fold_scales(block, s1, b1, s2, skip, skip_bias)

    def fold_scales(
        self, block: HyperbolicBlock, s1: Tensor, b1: Tensor, s2: Tensor, skip: Tensor, bias: Tensor
    ) -> None:
        """Fold the scales ``s1``, ``s2`` and the shift ``b1`` (the final shift is already in the shortcut's
        ``bias``)."""
        raise NotImplementedError


class Eq4(_PaperFoldForm):
    """Eq. (4): ``r = (C u) * A BN(K_a u)``, ``(C u)_i (A du/dx)_i + (D u)_i (B du/dy)_i`` with one ``C``."""

    name = "eq4"

    def coef_out(self, block: HyperbolicBlock) -> int:
        return block.out_chs

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        return block.norm_deriv(block.deriv(u))

    def residual(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        assert block.mix is not None
        return block.coef(u) * block.mix(self.branch(block, u))

    def fold_scales(
        self, block: HyperbolicBlock, s1: Tensor, b1: Tensor, s2: Tensor, skip: Tensor, bias: Tensor
    ) -> None:
        assert block.mix is not None
        a = block.mix.weight[:, :, 0, 0]  # (s2 C u) * (A s1 K u + A b1)
        block.coef.weight.mul_(s2[:, None, None, None])
        block.write_folded(a * s1[None, :], a @ b1, skip, bias)


class Eq5(_PaperFoldForm):
    """Eq. (5): ``r = sum_a (C_a u) * BN(K_a u)``, ``(C u)_i du_i/dx + (D u)_i du_i/dy``, no ``A``."""

    name, has_mix = "eq5", False

    def check(self, in_chs: int, out_chs: int, expansion: int) -> None:
        super().check(in_chs, out_chs, expansion)
        if out_chs < in_chs:
            raise ValueError(f"eq5 keeps each channel's index: out_chs must be >= in_chs, got {in_chs} -> {out_chs}")

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        raise ValueError("eq5 has no matrix A: use residual()")

    def residual(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        p = block.coef(u) * block.norm_deriv(block.deriv(u))
        return p.unflatten(1, (block.in_chs, block.expansion)).sum(2)

    def fold_scales(
        self, block: HyperbolicBlock, s1: Tensor, b1: Tensor, s2: Tensor, skip: Tensor, bias: Tensor
    ) -> None:
        w = block.coef.weight[:, :, 0, 0]  # sum_a (C_a u)_i (s1 K_a u + b1)_i, times s2_i
        scale = s2.repeat_interleave(block.expansion)
        linear = ((scale * b1)[:, None] * w).unflatten(0, (block.in_chs, block.expansion)).sum(1)
        skip = skip.clone()
        skip[: block.in_chs] += linear
        block.coef.weight.mul_((scale * s1)[:, None, None, None])
        block.write_folded(None, None, skip, bias)


class Eq6(_PaperFoldForm):
    """Eq. (6): ``r = A BN(K_a [u * (C u)])``, ``sum_j A_ij d/dx[u_j (C u)_j] + B d/dy[u (C u)]``, one ``C``."""

    name, coef_strided = "eq6", False

    def coef_out(self, block: HyperbolicBlock) -> int:
        return block.in_chs

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        return block.norm_deriv(block.deriv(u * block.coef(u)))

    def fold_scales(
        self, block: HyperbolicBlock, s1: Tensor, b1: Tensor, s2: Tensor, skip: Tensor, bias: Tensor
    ) -> None:
        assert block.mix is not None
        a = block.mix.weight[:, :, 0, 0]  # s2 A (s1 K v + b1)
        block.write_folded(s2[:, None] * a * s1[None, :], s2 * (a @ b1), skip, bias)


class Eq7(Equation):
    """Eq. (7): ``r = A BN(K_a [u * (C_a u)])``, ``sum_j A_ij d/dx[u_j (C u)_j] + B d/dy[u (D u)]``."""

    name, paper = "eq7", True

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        return block.norm_deriv(block.deriv(block.coef(u) * u.repeat_interleave(block.expansion, dim=1)))


class CoefGrad(Equation):
    """Library variant ``coef_grad``: ``h = u * BN(K_a (C_a u))``, the derivative of the coefficient."""

    name = "coef_grad"

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        d = block.norm_deriv(block.deriv(block.coef(u)))
        return d * _subsample(u, block.stride).repeat_interleave(block.expansion, dim=1)

    def shift_input(self, block: HyperbolicBlock) -> torch.Tensor:
        w = block.coef.weight  # the shift multiplies u itself, repeated k times
        return torch.eye(block.in_chs, dtype=w.dtype, device=w.device).repeat_interleave(block.expansion, dim=0)


class Mix(Equation):
    """Library variant ``mix``: ``h = (D u) * BN(K_a (C u))``, ``a = x, y``: eq3 differentiating ``C u``."""

    name, mixed = "mix", True

    def make_deriv(self, block: HyperbolicBlock) -> DerivativeConv:
        return DerivativeConv(block.hidden // 2, 2, 2, block.shared, block.stride)

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        v, w = block.coef(u).chunk(2, dim=1)
        return block.norm_deriv(block.deriv(v)) * _subsample(w, block.stride).repeat_interleave(2, dim=1)

    def shift_input(self, block: HyperbolicBlock) -> torch.Tensor:
        return block.coef.weight[block.hidden // 2 :, :, 0, 0].repeat_interleave(2, dim=0)  # it multiplies D u


class MixCons(Mix):
    """Library variant ``mix_cons``: ``h = BN(K_a ((C u) * (D u)))``, the conservative form of ``mix``."""

    name = "mix_cons"

    def branch(self, block: HyperbolicBlock, u: torch.Tensor) -> torch.Tensor:
        v, w = block.coef(u).chunk(2, dim=1)
        return block.norm_deriv(block.deriv(v * w))

    def shift_input(self, block: HyperbolicBlock) -> None:
        return None


#: the equations by name: the paper's ``"eq3"`` ... ``"eq7"``, then this library's variants
EQUATION_FORMS: dict[str, Equation] = {
    form.name: form for form in (Eq3(), Eq4(), Eq5(), Eq6(), Eq7(), Mix(), MixCons(), CoefGrad())
}
EQUATIONS: tuple[str, ...] = tuple(EQUATION_FORMS)
PAPER_EQUATIONS: tuple[str, ...] = tuple(n for n, f in EQUATION_FORMS.items() if f.paper)
# This library's variants (not equations of the paper), each of the form r = A h(u).
LIBRARY_VARIANTS: tuple[str, ...] = tuple(n for n, f in EQUATION_FORMS.items() if not f.paper)
# Forms whose folded block reads act(S u + c + A h_raw(u)) (the setting of pdevision.symmetry.transform).
BILINEAR_FORMS: tuple[str, ...] = tuple(n for n, f in EQUATION_FORMS.items() if f.bilinear)
# Variants in which the residual stream enters only through 1x1 convs (GL(n) acts on it).
MIXED_EQUATIONS: tuple[str, ...] = tuple(n for n, f in EQUATION_FORMS.items() if f.mixed)


class HyperbolicBlock(nn.Module):
    """One forward-Euler step of a quasi-linear hyperbolic system (Liu et al. 2023, Eqs. 3-7 or this library's
    variants, see the module docstring): ``act(shortcut(u) + DropPath(BN(r(u))))``, ``r`` the equation's
    (:data:`EQUATION_FORMS`). NCHW in ``(B, in_chs, H, W)``, out ``(B, out_chs, ceil(H / stride), ceil(W / stride))``.

    Args:
        in_chs: channels of ``u``.
        out_chs: channels of the output.
        stride: 1, or 2 for a downsampling block (the 3x3 and the 1x1 shortcut are strided).
        equation: one of :data:`EQUATIONS`: the paper's ``"eq3"`` ... ``"eq7"`` or a library variant
            (``"mix"``, ``"mix_cons"``, ``"coef_grad"``).
        expansion: ``k``, derivative channels per input channel (4 in the paper, 6 for "x6"); even for
            ``mix`` / ``mix_cons``.
        shared: one bank of derivative kernels for all channels (the paper's "ws") or one per channel.
        act_layer: activation after the sum (the stage's downsampling block), ``None`` for none.
        projection: 1x1 conv + BN shortcut; default when the shape changes.
        drop_path: stochastic depth of the branch.
    """

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        stride: int = 1,
        equation: str = "eq3",
        expansion: int = 4,
        shared: bool = True,
        act_layer: nn.Module | None = None,
        projection: bool | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        if equation not in EQUATION_FORMS:
            raise ValueError(f"equation must be one of {EQUATIONS}, got {equation!r}")
        self.form = form = EQUATION_FORMS[equation]
        form.check(in_chs, out_chs, expansion)
        if projection is None:
            projection = in_chs != out_chs or stride != 1
        if not projection and (in_chs != out_chs or stride != 1):
            raise ValueError(
                f"an identity shortcut needs in_chs == out_chs and stride 1, got {in_chs}, {out_chs}, {stride}"
            )
        self.in_chs, self.out_chs, self.stride = in_chs, out_chs, stride
        self.equation, self.expansion, self.shared = equation, expansion, shared
        self.hidden = hidden = expansion * in_chs
        self.folded = False

        # coef: the coefficient matrices C (C_a stacked); deriv: the 3x3 kernels; mix: A (A_a stacked)
        self.coef = nn.Conv2d(in_chs, form.coef_out(self), 1, stride=stride if form.coef_strided else 1, bias=False)
        self.deriv = form.make_deriv(self)
        self.norm_deriv: nn.Module = nn.BatchNorm2d(hidden)
        self.mix: nn.Conv2d | None = nn.Conv2d(hidden, out_chs, 1, bias=False) if form.has_mix else None
        self.branch_chs = in_chs if self.mix is None else out_chs  # eq5: each u_i sees its own derivatives
        self.norm: nn.Module = nn.BatchNorm2d(self.branch_chs)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.shortcut: nn.Module = (
            nn.Sequential(
                OrderedDict(conv=nn.Conv2d(in_chs, out_chs, 1, stride=stride, bias=False), bn=nn.BatchNorm2d(out_chs))
            )
            if projection
            else nn.Identity()
        )
        self.act = act_layer if act_layer is not None else nn.Identity()

    def zero_init_last(self) -> None:
        """Start as the shortcut alone (last BatchNorm scale 0), as timm's ResNets do."""
        if isinstance(self.norm, nn.BatchNorm2d):
            nn.init.zeros_(self.norm.weight)

    def branch(self, u: torch.Tensor) -> torch.Tensor:
        """``h(u)``, the ``k n`` channels fed to ``A`` (NCHW, at the output resolution); for eq4 ``BN(K u)``;
        eq5 has no ``A`` (see :meth:`residual`)."""
        return self.form.branch(self, u)

    def residual(self, u: torch.Tensor) -> torch.Tensor:
        """``r(u)``, the branch before its final BatchNorm: ``branch_chs`` channels at the output resolution."""
        return self.form.residual(self, u)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        r = self.norm(self.residual(u))
        if self.branch_chs != self.out_chs:  # eq5 in a widening block: the branch writes the first channels
            r = F.pad(r, (0, 0, 0, 0, 0, self.out_chs - self.branch_chs))
        return self.act(self.shortcut(u) + self.drop_path(r))

    def shortcut_matrix(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The shortcut in eval mode as ``(S, b)``: ``S u + b`` (``S`` is ``out x in``)."""
        w = self.coef.weight
        if isinstance(self.shortcut, nn.Sequential):
            sp, bp = _bn_affine(self.shortcut.bn)
            return sp[:, None] * self.shortcut.conv.weight[:, :, 0, 0], bp
        eye = torch.eye(self.in_chs, dtype=w.dtype, device=w.device)
        return eye, torch.zeros(self.out_chs, dtype=w.dtype, device=w.device)

    def write_folded(
        self,
        mix: torch.Tensor | None,
        mix_bias: torch.Tensor | None,
        skip: torch.Tensor,
        skip_bias: torch.Tensor | None,
    ) -> None:
        """Replace ``mix`` (when given) and the shortcut by 1x1 convs of these weights and biases; drop the
        BatchNorms."""
        dev, dt = skip.device, skip.dtype
        if mix is not None:
            conv = nn.Conv2d(self.hidden, self.out_chs, 1, bias=mix_bias is not None, device=dev, dtype=dt)
            conv.weight.copy_(mix[:, :, None, None])
            if mix_bias is not None:
                conv.bias.copy_(mix_bias)
            self.mix = conv
        shortcut = nn.Conv2d(
            self.in_chs, self.out_chs, 1, stride=self.stride, bias=skip_bias is not None, device=dev, dtype=dt
        )
        shortcut.weight.copy_(skip[:, :, None, None])
        if skip_bias is not None:
            shortcut.bias.copy_(skip_bias)
        self.shortcut = shortcut
        self.norm_deriv, self.norm = nn.Identity(), nn.Identity()
        self.folded = True

    @torch.no_grad()
    def fold_batchnorm(self) -> None:
        """Fold the BatchNorms (running statistics) into the convs, in place; in eval mode the block then
        computes the same function. For eq3, eq7 and the library variants the block becomes ``act(S u + c + A' h_raw
        (u))`` with ``A'`` carrying the bias ``c`` and a dense 1x1 shortcut ``S`` (also where it was the
        identity); eq4, eq5, eq6 keep their form with biases in ``mix`` and the shortcut."""
        if not self.folded:
            self.form.fold(self)

    def extra_repr(self) -> str:
        return (
            f"{self.in_chs} -> {self.out_chs}, stride={self.stride}, equation={self.equation}, "
            f"expansion={self.expansion}, shared={self.shared}, folded={self.folded}"
        )


class BoundedActivation(nn.Module):
    """``hardtanh`` (entry-wise clip at +-1), ``hardball`` or ``softball`` (per-pixel channel vector, radius
    ``sqrt(C)`` by default) from :mod:`pdevision.ops.ball`. NCHW in and out."""

    def __init__(self, kind: str, radius: float | None = None) -> None:
        super().__init__()
        if kind not in ("hardtanh", "hardball", "softball"):
            raise ValueError(f"kind must be 'hardtanh', 'hardball' or 'softball', got {kind!r}")
        self.kind, self.radius = kind, radius

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "hardtanh":
            return hardtanh(x)
        fn = hardball if self.kind == "hardball" else softball
        return fn(x, self.radius, dim=1)

    def extra_repr(self) -> str:
        return self.kind if self.radius is None else f"{self.kind}, radius={self.radius}"


def create_activation(name: str) -> nn.Module | None:
    """The stage activation for a name of :data:`ACTIVATIONS` (``"relu@all"`` gives ReLU; ``"none"`` None)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")
    if name == "none":
        return None
    if name in ("relu", "relu@all"):
        return nn.ReLU()
    return BoundedActivation(name)


class ResNetStem(nn.Module):
    """ResNet's stem: 7x7 stride-2 conv, BatchNorm, ReLU, 3x3 stride-2 max pool (stride 4). NCHW in and out."""

    def __init__(self, in_chans: int, out_chs: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chs, 7, stride=2, padding=3, bias=False)
        self.bn: nn.Module = nn.BatchNorm2d(out_chs)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.folded = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.act(self.bn(self.conv(x))))

    @torch.no_grad()
    def fold_batchnorm(self) -> None:
        """Fold the BatchNorm (running statistics) into the conv, in place."""
        if self.folded:
            return
        scale, shift = _bn_affine(self.bn)
        conv = self.conv
        fused = nn.Conv2d(
            conv.in_channels,
            conv.out_channels,
            7,
            stride=2,
            padding=3,
            bias=True,
            device=conv.weight.device,
            dtype=conv.weight.dtype,
        )
        fused.weight.copy_(conv.weight * scale[:, None, None, None])
        fused.bias.copy_(shift)
        self.conv, self.bn, self.folded = fused, nn.Identity(), True


def _kaiming_1x1(m: nn.Module) -> None:
    if isinstance(m, nn.Conv2d) and m.kernel_size != (3, 3):
        nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="linear")
        if m.kernel_size == (7, 7):
            m.weight.mul_(math.sqrt(2.0))  # the stem is followed by a ReLU


def init_hyperbolic_weights(module: nn.Module) -> None:
    """Kaiming-normal (linear gain) for the 1x1 and stem convs; derivative kernels keep their stencils."""
    with torch.no_grad():
        module.apply(_kaiming_1x1)
