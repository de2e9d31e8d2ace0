"""Quasi-linear hyperbolic blocks of PDE-ResNet (Liu et al., "A Novel Convolutional Neural Network
Architecture with a Continuous Symmetry", arXiv:2308.01621), with their stem and activations.

All tensors are NCHW. ``u`` is the block input (``n`` channels, the residual stream), ``k`` the expansion
factor, ``K_a`` the 3x3 derivative kernels (trainable, initialised to the stencils of ``d/dx``, ``d/dy``,
``d2/dx2``, ``d2/dy2``, ``d2/dxdy`` and a smoothing kernel), ``*`` the element-wise product, ``W`` one 1x1 conv
``n -> k n`` (the coefficient matrices ``C, D, ...`` stacked) and ``A`` one 1x1 conv ``k n -> n_out`` (``A, B, ...``
stacked). One forward-Euler step is ``u_out = act(shortcut(u) + BN(A h))`` with ``h`` per equation:

====== ============================================ ==================================================
 name   ``h`` (``a`` runs over the kernels)           PDE reading
====== ============================================ ==================================================
 eq3    ``(C_a u) * BN(K_a u)``, ``a = 1..k``          Eq. (3): ``du_i/dt = sum_j A_ij (C u)_j du_j/dx + ...``
 eq4    ``BN(K_a ((C_a u) * u))``                      conservative form of eq3, ``d/dx[(C u) u]``
 eq5    ``(D u) * BN(K_a (C u))``, ``a = x, y``        eq3 with the differentiated variable mixed, ``C u``
 eq6    ``BN(K_a ((C u) * (D u)))``, ``a = x, y``      conservative form of eq5, ``d/dx[(C u)(D u)]``
 eq7    ``u * BN(K_a (C_a u))``                        derivative of the coefficient, ``u d/dx (C u)``
====== ============================================ ==================================================

Eq. (3) is the paper's equation as printed; the labels eq4-eq7 are this library's reconstruction of the
paper's variants (the paper's text was not available offline when this was written): the formula above is
what each label computes. In eq3/eq4/eq7 the stream enters the product entry by entry, so only monomial
matrices (permutations times diagonal scalings) can be compensated in the weights; in eq5/eq6 the stream is
read only by 1x1 convs, so all of GL(n) can (see :mod:`pdevision.symmetry`). Every variant has the same
parameter count: ``k n_in^2`` (``W``) + ``k n_in n_out`` (``A``) + the kernels (``k n_in`` 3x3 kernels, or one
shared bank of ``k`` (eq3/4/7) or 2 (eq5/6) kernels with ``shared=True``).

In eval mode :meth:`HyperbolicBlock.fold_batchnorm` writes a block with the derivative kernels and matrices
only: ``u_out = act(S u + c + A' h_raw)``, ``h_raw`` being ``h`` without its BatchNorm (its scale moves into
``A'``, its shift into ``S`` or ``c``).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from timm.layers import DropPath
from torch import nn

from pdevision.ops.ball import hardball, hardtanh, softball

EQUATIONS: tuple[str, ...] = ("eq3", "eq4", "eq5", "eq6", "eq7")
# Equations in which the residual stream enters only through 1x1 convs (GL(n) acts on it).
MIXED_EQUATIONS: tuple[str, ...] = ("eq5", "eq6")
ACTIVATIONS: tuple[str, ...] = ("none", "relu", "relu@all", "hardtanh", "hardball", "softball")

__all__ = [
    "ACTIVATIONS",
    "EQUATIONS",
    "MIXED_EQUATIONS",
    "BoundedActivation",
    "DerivativeConv",
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


class HyperbolicBlock(nn.Module):
    """One forward-Euler step of a quasi-linear hyperbolic system (Liu et al. 2023, Eq. 3 and variants, see
    the module docstring): ``act(shortcut(u) + DropPath(BN(A h(u))))``. NCHW in ``(B, in_chs, H, W)``, out
    ``(B, out_chs, ceil(H / stride), ceil(W / stride))``.

    Args:
        in_chs, out_chs: channels of ``u`` and of the output.
        stride: 1, or 2 for a downsampling block (the 3x3 and the 1x1 shortcut are strided).
        equation: ``"eq3"`` ... ``"eq7"``.
        expansion: hidden channels ``k * in_chs`` (4 in the paper, 6 for "x6"); even for eq5/eq6.
        shared: one bank of derivative kernels for all channels (the paper's default) or one per channel.
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
        if equation not in EQUATIONS:
            raise ValueError(f"equation must be one of {EQUATIONS}, got {equation!r}")
        if expansion < 1 or (equation in MIXED_EQUATIONS and expansion % 2):
            raise ValueError(f"expansion must be a positive integer (even for {MIXED_EQUATIONS}), got {expansion}")
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

        self.coef = nn.Conv2d(in_chs, hidden, 1, stride=stride if equation == "eq3" else 1, bias=False)
        if equation == "eq3":
            self.deriv = DerivativeConv(in_chs, expansion, expansion, shared, stride)
        elif equation in ("eq4", "eq7"):
            self.deriv = DerivativeConv(hidden, 1, expansion, shared, stride)
        else:
            self.deriv = DerivativeConv(hidden // 2, 2, 2, shared, stride)
        self.norm_deriv: nn.Module = nn.BatchNorm2d(hidden)
        self.mix = nn.Conv2d(hidden, out_chs, 1, bias=False)
        self.norm: nn.Module = nn.BatchNorm2d(out_chs)
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
        """``h(u)``, the ``k n`` channels fed to ``A`` (NCHW, at the output resolution)."""
        k, s, eq = self.expansion, self.stride, self.equation
        if eq == "eq3":
            return self.norm_deriv(self.deriv(u)) * self.coef(u)
        if eq == "eq4":
            return self.norm_deriv(self.deriv(self.coef(u) * u.repeat_interleave(k, dim=1)))
        if eq == "eq7":
            return self.norm_deriv(self.deriv(self.coef(u))) * _subsample(u, s).repeat_interleave(k, dim=1)
        v, w = self.coef(u).chunk(2, dim=1)
        if eq == "eq5":
            return self.norm_deriv(self.deriv(v)) * _subsample(w, s).repeat_interleave(2, dim=1)
        return self.norm_deriv(self.deriv(v * w))  # eq6

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.act(self.shortcut(u) + self.drop_path(self.norm(self.mix(self.branch(u)))))

    @torch.no_grad()
    def fold_batchnorm(self) -> None:
        """Fold the three BatchNorms (running statistics) into ``A`` (now with a bias ``c``) and a 1x1 shortcut
        ``S``, in place: afterwards the block is ``act(S u + c + A' h_raw(u))`` and, in eval mode, computes the
        same function. ``S`` is a dense 1x1 conv also where the shortcut was the identity."""
        if self.folded:
            return
        s1, b1 = _bn_affine(self.norm_deriv)
        s2, b2 = _bn_affine(self.norm)
        a = self.mix.weight[:, :, 0, 0]
        w = self.coef.weight[:, :, 0, 0]
        k = self.expansion
        new_a = s2[:, None] * a * s1[None, :]
        bias = b2.clone()
        # The BatchNorm shift of the 3x3 output: a constant (eq4/eq6) or a linear term in u (eq3/eq5/eq7).
        if self.equation in ("eq4", "eq6"):
            bias += s2 * (a @ b1)
            linear = torch.zeros(self.out_chs, self.in_chs, dtype=a.dtype, device=a.device)
        elif self.equation == "eq3":
            linear = (s2[:, None] * a * b1[None, :]) @ w
        elif self.equation == "eq5":
            d = w[self.hidden // 2 :].repeat_interleave(2, dim=0)
            linear = (s2[:, None] * a * b1[None, :]) @ d
        else:  # eq7: the shift multiplies u itself, repeated k times
            eye = torch.eye(self.in_chs, dtype=a.dtype, device=a.device).repeat_interleave(k, dim=0)
            linear = (s2[:, None] * a * b1[None, :]) @ eye
        if isinstance(self.shortcut, nn.Sequential):
            sp, bp = _bn_affine(self.shortcut.bn)
            skip = sp[:, None] * self.shortcut.conv.weight[:, :, 0, 0]
            bias += bp
        else:
            skip = torch.eye(self.in_chs, dtype=a.dtype, device=a.device)
        dev, dt = a.device, a.dtype
        mix = nn.Conv2d(self.hidden, self.out_chs, 1, bias=True, device=dev, dtype=dt)
        mix.weight.copy_(new_a[:, :, None, None])
        mix.bias.copy_(bias)
        shortcut = nn.Conv2d(self.in_chs, self.out_chs, 1, stride=self.stride, bias=False, device=dev, dtype=dt)
        shortcut.weight.copy_((skip + linear)[:, :, None, None])
        self.mix, self.shortcut = mix, shortcut
        self.norm_deriv, self.norm = nn.Identity(), nn.Identity()
        self.folded = True

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
