"""Hyperbolic blocks: Eq. (3) against a direct evaluation of the PDE, the variants, shapes, folding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pdevision.layers import (
    EQUATIONS,
    BoundedActivation,
    DerivativeConv,
    HyperbolicBlock,
    ResNetStem,
    create_activation,
    derivative_stencils,
)
from pdevision.layers.hyperbolic import EQUATION_FORMS
from tests.helpers import randomise_bn_and_kernels


def _quadratic_field(channels: int, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``u_j = a + b x + c y + d x^2 + e xy + f y^2`` and its exact x and y derivatives, ``(1, C, H, W)``."""
    coeffs = torch.randn(6, channels, 1, 1, dtype=torch.float64) * 0.3
    y, x = torch.meshgrid(
        torch.arange(h, dtype=torch.float64) / h, torch.arange(w, dtype=torch.float64) / w, indexing="ij"
    )
    a, b, c, d, e, f = coeffs
    u = a + b * x + c * y + d * x * x + e * x * y + f * y * y
    ux = (b + 2 * d * x + e * y) / w  # per pixel step
    uy = (c + e * x + 2 * f * y) / h
    return u[None], ux[None], uy[None]


def test_eq3_is_the_papers_equation() -> None:
    """With central differences as kernels and identity BatchNorms, the eq3 block with k = 2 is one Euler step of
    du_i/dt = sum_j A_ij (C u)_j du_j/dx + sum_j B_ij (D u)_j du_j/dy (interior pixels)."""
    n = 5
    block = HyperbolicBlock(n, n, equation="eq3", expansion=2).double().eval()
    block.norm_deriv.eps = block.norm.eps = 0.0
    central = torch.zeros(2, 1, 3, 3, dtype=torch.float64)
    central[0, 0, 1] = torch.tensor([-0.5, 0.0, 0.5])  # d/dx, x along the width
    central[1, 0, :, 1] = torch.tensor([-0.5, 0.0, 0.5])  # d/dy
    with torch.no_grad():
        block.deriv.weight.copy_(central)
    u, ux, uy = _quadratic_field(n, 9, 11)
    w = block.coef.weight[:, :, 0, 0].detach()
    m = block.mix.weight[:, :, 0, 0].detach()
    c, d = w[0::2], w[1::2]  # hidden channel j * k + a: a = 0 is x, a = 1 is y
    a, b = m[:, 0::2], m[:, 1::2]
    cu = torch.einsum("jk,bkhw->bjhw", c, u)
    du = torch.einsum("jk,bkhw->bjhw", d, u)
    rhs = torch.einsum("ij,bjhw->bihw", a, cu * ux) + torch.einsum("ij,bjhw->bihw", b, du * uy)
    with torch.no_grad():
        out = block(u)
    torch.testing.assert_close(out[..., 1:-1, 1:-1], (u + rhs)[..., 1:-1, 1:-1], rtol=1e-10, atol=1e-12)


def test_derivative_stencils_differentiate() -> None:
    k = derivative_stencils(6)
    assert k.shape == (6, 1, 3, 3)
    torch.testing.assert_close(k.flatten(1).norm(dim=1), torch.ones(6))
    y, x = torch.meshgrid(torch.arange(7.0), torch.arange(8.0), indexing="ij")
    ramp_x = (2 * x + 0 * y)[None, None]
    out = F.conv2d(ramp_x, k[:2])[0]
    assert torch.allclose(out[0], out[0, 0, 0].expand_as(out[0])) and out[0, 0, 0] > 0  # d/dx constant
    torch.testing.assert_close(out[1], torch.zeros_like(out[1]))  # d/dy of a ramp in x
    assert derivative_stencils(8).shape == (8, 1, 3, 3)


@pytest.mark.parametrize("shared", [True, False])
def test_derivative_conv_split_and_sharing(shared: bool) -> None:
    conv = DerivativeConv(3, splits=4, bank=4, shared=shared)
    assert conv.weight.shape == ((4, 1, 3, 3) if shared else (12, 1, 3, 3))
    x = torch.randn(2, 3, 7, 5)
    y = conv(x)
    assert y.shape == (2, 12, 7, 5)
    kernels = conv.kernels()
    for j in range(3):
        for a in range(4):
            ref = F.conv2d(x[:, j : j + 1], kernels[j * 4 + a : j * 4 + a + 1], padding=1)
            torch.testing.assert_close(y[:, j * 4 + a : j * 4 + a + 1], ref)
    assert DerivativeConv(3, 2, 2, shared, stride=2)(torch.randn(1, 3, 7, 5)).shape == (1, 6, 4, 3)
    with pytest.raises(ValueError, match="multiple of the bank"):
        DerivativeConv(3, 1, 4)


@pytest.mark.parametrize("equation", EQUATIONS)
@pytest.mark.parametrize("stride", [1, 2])
def test_block_shapes_and_parameter_count(equation: str, stride: int) -> None:
    n_in, n_out, k = 6, 10, 4
    block = HyperbolicBlock(n_in, n_out, stride=stride, equation=equation, expansion=k, shared=False)
    out = block(torch.randn(2, n_in, 9, 8))
    assert out.shape == (2, n_out, 5 if stride == 2 else 9, 4 if stride == 2 else 8)
    n_params = sum(p.numel() for p in block.parameters())
    # C, A (or their replacements), the per-channel kernels, the two BatchNorms, the projection shortcut
    coef_and_mix = {
        "eq4": n_in * n_out + k * n_in * n_out,  # one C n -> n_out, A
        "eq5": k * n_in * n_in,  # C_a, no A
        "eq6": n_in * n_in + k * n_in * n_out,  # one C n -> n, A
    }.get(equation, k * n_in * n_in + k * n_in * n_out)
    final_bn = 2 * (n_in if equation == "eq5" else n_out)
    expected = coef_and_mix + 9 * k * n_in + 2 * k * n_in + final_bn + n_in * n_out + 2 * n_out
    assert n_params == expected
    shared = HyperbolicBlock(n_in, n_out, stride=stride, equation=equation, expansion=k)
    bank = 2 if equation in ("mix", "mix_cons") else k
    assert shared.deriv.weight.shape == (bank, 1, 3, 3)


@pytest.mark.parametrize("equation", EQUATIONS)
@pytest.mark.parametrize("shared", [True, False])
def test_fold_batchnorm_is_exact(equation: str, shared: bool) -> None:
    for n_in, n_out, stride in ((6, 6, 1), (6, 8, 2)):
        block = HyperbolicBlock(n_in, n_out, stride, equation, 4, shared, act_layer=BoundedActivation("softball"))
        block = block.double().eval()
        randomise_bn_and_kernels(block)
        x = torch.randn(2, n_in, 9, 7, dtype=torch.float64)
        with torch.no_grad():
            ref = block(x)
            block.fold_batchnorm()
            out = block(x)
        assert block.folded and isinstance(block.norm, nn.Identity) and isinstance(block.norm_deriv, nn.Identity)
        assert isinstance(block.shortcut, nn.Conv2d)
        assert block.mix is None if equation == "eq5" else block.mix.bias is not None
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        block.fold_batchnorm()  # idempotent
        with torch.no_grad():
            torch.testing.assert_close(block(x), ref, rtol=1e-12, atol=1e-12)


def test_zero_init_last_starts_as_shortcut() -> None:
    block = HyperbolicBlock(4, 4, equation="mix_cons").eval()
    block.zero_init_last()
    x = torch.randn(1, 4, 5, 5)
    torch.testing.assert_close(block(x), x)


def test_stem_fold_and_shape() -> None:
    stem = ResNetStem(3, 8).double().eval()
    randomise_bn_and_kernels(stem)
    x = torch.randn(2, 3, 33, 30, dtype=torch.float64)
    with torch.no_grad():
        ref = stem(x)
        stem.fold_batchnorm()
        torch.testing.assert_close(stem(x), ref, rtol=1e-12, atol=1e-12)
    assert ref.shape == (2, 8, 9, 8)


def test_activation_factory() -> None:
    assert create_activation("none") is None
    assert isinstance(create_activation("relu@all"), nn.ReLU)
    assert create_activation("softball").kind == "softball"
    x = torch.randn(2, 4, 3, 3) * 3
    torch.testing.assert_close(create_activation("hardtanh")(x), x.clamp(-1, 1))
    with pytest.raises(ValueError, match="activation must be one of"):
        create_activation("gelu")
    with pytest.raises(ValueError, match="kind must be"):
        BoundedActivation("tanh")


def test_bad_block_arguments() -> None:
    with pytest.raises(ValueError, match="equation must be one of"):
        HyperbolicBlock(4, 4, equation="eq8")
    with pytest.raises(ValueError, match="even for"):
        HyperbolicBlock(4, 4, equation="mix", expansion=3)
    with pytest.raises(ValueError, match="identity shortcut"):
        HyperbolicBlock(4, 8, projection=False)


def test_each_equation_is_one_small_form_that_names_its_equation() -> None:
    """The block reads its equation from the table (no branch on the name): one form per equation, whose one-line
    docstring names it (the paper's equation number, or the library variant's name)."""
    assert tuple(EQUATION_FORMS) == EQUATIONS
    for name, form in EQUATION_FORMS.items():
        doc = type(form).__doc__
        assert doc is not None and "\n" not in doc.strip(), name
        assert (f"Eq. ({name[2:]})" if name.startswith("eq") else f"``{name}``") in doc, doc
        block = HyperbolicBlock(4, 8, stride=2, equation=name)
        assert block.form is form and block.equation == name
