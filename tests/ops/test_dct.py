"""The DCT pair against scipy's orthonormal DCT-II/III."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.fft
import torch

from pdevision.ops import dct as dct_module
from pdevision.ops import dct2, dct_matrix, idct2, resolve_method, set_auto_threshold

SHAPES = [(2, 3, 7, 10), (1, 1, 1, 5), (2, 4, 16, 16), (1, 2, 14, 9), (1, 1, 56, 56)]


@pytest.mark.parametrize("method", ["matrix", "fft"])
@pytest.mark.parametrize("shape", SHAPES)
def test_dct2_matches_scipy_fp32(method: str, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    ref = scipy.fft.dctn(x.double().numpy(), type=2, norm="ortho", axes=(-2, -1))
    out = dct2(x, method=method)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-5, rtol=0)
    ref_inv = scipy.fft.idctn(x.double().numpy(), type=2, norm="ortho", axes=(-2, -1))
    np.testing.assert_allclose(idct2(x, method=method).numpy(), ref_inv, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", ["matrix", "fft"])
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_below_1e5(method: str, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    err = (idct2(dct2(x, method=method), method=method) - x).abs().max().item()
    assert err < 1e-5


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_channels_last_dims(method: str) -> None:
    x = torch.randn(2, 9, 6, 5, dtype=torch.float64)  # NHWC
    ref = scipy.fft.dctn(x.numpy(), type=2, norm="ortho", axes=(1, 2))
    np.testing.assert_allclose(dct2(x, dims=(1, 2), method=method).numpy(), ref, atol=1e-12)
    # swapped order of dims gives the same separable transform
    np.testing.assert_allclose(dct2(x, dims=(2, 1), method=method).numpy(), ref, atol=1e-12)


def test_matrix_is_orthonormal_and_cached() -> None:
    c = dct_matrix(12, dtype=torch.float64)
    np.testing.assert_allclose((c @ c.T).numpy(), np.eye(12), atol=1e-12)
    np.testing.assert_allclose(c.numpy(), scipy.fft.dct(np.eye(12), type=2, norm="ortho", axis=0), atol=1e-12)
    assert dct_matrix(12, dtype=torch.float64) is c


def test_auto_switches_at_threshold() -> None:
    old = dct_module._AUTO_FFT_MIN_TOKENS
    try:
        set_auto_threshold(100)
        assert resolve_method("auto", 9, 11) == "matrix"
        assert resolve_method("auto", 10, 10) == "fft"
        assert resolve_method("matrix", 100, 100) == "matrix"
    finally:
        set_auto_threshold(old)


def test_bad_arguments_are_clear() -> None:
    x = torch.randn(2, 3, 4, 4)
    with pytest.raises(ValueError, match="'matrix', 'fft' or 'auto'"):
        dct2(x, method="wavelet")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two different dimensions"):
        dct2(x, dims=(2, -2))
    with pytest.raises(ValueError, match="positive token count"):
        set_auto_threshold(0)


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_dct_gradcheck(method: str) -> None:
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: dct2(t, method=method), (x,))
    assert torch.autograd.gradcheck(lambda t: idct2(t, method=method), (x,))


def test_bfloat16_runs() -> None:
    x = torch.randn(2, 3, 14, 14)
    for method in ("matrix", "fft"):
        y = dct2(x.bfloat16(), method=method)
        assert y.dtype == torch.bfloat16
        assert (y.float() - dct2(x, method=method)).abs().max() < 0.1


def test_force_method_overrides_auto_only() -> None:
    from pdevision.ops import force_method

    with force_method("fft"):
        assert resolve_method("auto", 2, 2) == "fft"
        assert resolve_method("matrix", 2, 2) == "matrix"
    assert resolve_method("auto", 2, 2) == "matrix"
    with pytest.raises(ValueError, match="forced DCT method"):
        with force_method("auto"):  # type: ignore[arg-type]
            pass


def test_fft_flops_tally_counts_only_fft_path() -> None:
    from pdevision.ops.dct import tally_fft_flops

    x = torch.randn(2, 3, 16, 8)
    with tally_fft_flops() as flops:
        dct2(x, method="matrix")
    assert flops[0] == 0
    with tally_fft_flops() as flops:
        dct2(x, method="fft")
    # 48 signals of 16 along H, then 96 of 8 along W
    expected = 2 * 3 * 8 * (2.5 * 16 * 4 + 8 * 16) + 2 * 3 * 16 * (2.5 * 8 * 3 + 8 * 8)
    assert flops[0] == pytest.approx(expected)


def test_cached_basis_built_in_inference_mode_serves_autograd() -> None:
    with torch.inference_mode():
        dct2(torch.randn(1, 1, 23, 29), method="matrix")  # first use of these sizes, in inference mode
    x = torch.randn(1, 1, 23, 29, requires_grad=True)
    dct2(x, method="matrix").sum().backward()
    # d/dx sum(C_h x C_w^T) = C_h^T 1 C_w: the inverse transform of a field of ones
    torch.testing.assert_close(x.grad, idct2(torch.ones_like(x), method="fft"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_batched_basis_matches_scipy_nhwc(dtype: torch.dtype) -> None:
    # NHWC with a batch: the transform along H is batched over images, along W over rows (the cached basis batch)
    x = torch.randn(3, 12, 10, 5)
    spec = scipy.fft.dctn(x.double().numpy(), type=2, norm="ortho", axes=(1, 2))
    with torch.inference_mode():  # a basis batch built here must serve autograd below
        got = dct2(x.to(dtype), dims=(1, 2), method="matrix")
        back = idct2(got, dims=(1, 2), method="matrix")
    np.testing.assert_allclose(got.double().numpy(), spec, atol=0.1)
    np.testing.assert_allclose(back.double().numpy(), x.numpy(), atol=0.1)
    # the same products as a bmm of the expanded basis, so the same values
    c_w = dct_matrix(10, dtype=dtype)
    want = torch.bmm(c_w.expand(36, 10, 10), x.to(dtype).reshape(36, 10, 5)).reshape(3, 12, 10, 5)
    torch.testing.assert_close(dct_module._apply_basis(x.to(dtype), 2, inverse=False), want, rtol=0, atol=0)
    xg = x.to(dtype).requires_grad_()
    idct2(dct2(xg, dims=(1, 2), method="matrix"), dims=(1, 2), method="matrix").float().sum().backward()
    torch.testing.assert_close(xg.grad.float(), torch.ones_like(x), atol=0.1, rtol=0)


def test_basis_batch_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # NHWC (2, 6, 7, 3): along H a batch of 2 bases of 6x6 (72 values), along W a batch of 12 of 7x7 (588 values)
    x = torch.randn(2, 6, 7, 3).bfloat16()
    cache = dct_module._basis_batch_cached
    cache.cache_clear()
    monkeypatch.setattr(dct_module, "_BASIS_BATCH_MAX_VALUES", 587)
    y = dct2(x, dims=(1, 2), method="matrix")
    assert cache.cache_info().currsize == 1  # the W batch is one value too large: expanded, not kept
    monkeypatch.setattr(dct_module, "_BASIS_BATCH_MAX_VALUES", 588)
    torch.testing.assert_close(dct2(x, dims=(1, 2), method="matrix"), y, rtol=0, atol=0)  # same values either way
    assert cache.cache_info().currsize == 2


@pytest.mark.parametrize("transform", [dct2, idct2])
@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_what_the_transform_cannot_take_is_a_clear_error(transform, method: str) -> None:
    # an integer tensor used to meet an integer basis on the matrix path: every coefficient truncated to 0
    for dtype in (torch.int64, torch.uint8, torch.bool, torch.complex64):
        with pytest.raises(TypeError, match=re.escape(f"real floating-point tensor, got {dtype}")):
            transform(torch.ones(1, 1, 4, 4, dtype=dtype), method=method)
    with pytest.raises(TypeError, match=r"takes a torch\.Tensor, got list"):
        transform([[1.0, 2.0], [3.0, 4.0]], method=method)
    x = torch.randn(2, 3, 8, 8)
    # out-of-range dims used to wrap around (5, 6 became 1, 2: channels and height transformed)
    with pytest.raises(ValueError, match=r"dims \(5, 6\) out of range for a 4-D tensor"):
        transform(x, dims=(5, 6), method=method)
    with pytest.raises(ValueError, match=r"dims \(-5, -1\) out of range"):
        transform(x, dims=(-5, -1), method=method)
    with pytest.raises(ValueError, match=r"out of range for a 0-D tensor"):
        transform(torch.tensor(1.0), method=method)
    with pytest.raises(ValueError, match="spatial dimensions must not be empty, got 0x8"):
        transform(torch.randn(2, 3, 0, 8), method=method)


@pytest.mark.parametrize("method", ["matrix", "fft"])
def test_an_empty_batch_transforms_to_an_empty_batch(method: str) -> None:
    for transform in (dct2, idct2):
        out = transform(torch.randn(0, 3, 8, 8), method=method)
        assert out.shape == (0, 3, 8, 8) and out.dtype == torch.float32


class _GraphDct(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return idct2(dct2(x, dims=(1, 2)) * 0.5 + 1.0, dims=(1, 2)) + dct2(x, dims=(-2, -1))


def test_graph_basis_equals_the_cached_basis() -> None:
    """The basis a recorded graph builds from a (symbolic or traced) size, against the float64 one."""
    for n in (1, 2, 7, 56, 200):
        graph = dct_module.dct_basis(n, torch.device("cpu"), torch.float32)
        torch.testing.assert_close(graph.double(), dct_matrix(n, dtype=torch.float64), rtol=0, atol=2e-6)
    assert dct_module.dct_basis(5, torch.device("cpu"), torch.float64).dtype == torch.float64


def test_dct_traced_at_one_size_runs_at_others_against_scipy() -> None:
    """torch.jit.trace (the legacy ONNX exporter's tracer) records the bases from the input's shape: the graph traced
    on one size computes scipy's DCT at other sizes (a basis traced as a constant would fail to broadcast)."""
    with torch.no_grad():
        traced = torch.jit.trace(_GraphDct(), torch.randn(2, 6, 5, 3), check_trace=False)
    for shape in [(1, 9, 4, 3), (2, 3, 11, 3)]:
        x = torch.randn(shape, dtype=torch.float64)
        coeff = scipy.fft.dctn(x.numpy(), type=2, norm="ortho", axes=(1, 2))
        ref = scipy.fft.idctn(coeff * 0.5 + 1.0, type=2, norm="ortho", axes=(1, 2))
        ref = ref + scipy.fft.dctn(x.numpy(), type=2, norm="ortho", axes=(-2, -1))
        np.testing.assert_allclose(traced(x.float()).double().numpy(), ref, rtol=1e-5, atol=1e-5)
