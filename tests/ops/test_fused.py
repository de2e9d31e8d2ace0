"""The oneDNN inference kernels compute the reference functions (scipy's DCT, F.linear) and step aside where they
must (autograd, reference_kernels, dispatch modes such as the FLOP counter)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from pdevision.ops import fused

pytestmark = pytest.mark.skipif(not fused._onednn_ok(), reason="PyTorch built without oneDNN")


@pytest.mark.parametrize("shape", [(2, 29, 31, 6), (1, 40, 33, 16)])
def test_heat_filter_matches_scipy_dctn(shape: tuple[int, int, int, int]) -> None:
    _, h, w, c = shape
    u = torch.randn(shape)
    decay = torch.rand(h, w, c)
    with torch.inference_mode():
        got = fused.heat_filter_nhwc(u, decay.transpose(0, 1).contiguous())
    spec = scipy.fft.dctn(u.double().numpy(), type=2, norm="ortho", axes=(1, 2))
    want = scipy.fft.idctn(spec * decay.double().numpy(), type=2, norm="ortho", axes=(1, 2))
    np.testing.assert_allclose(got.numpy(), want, atol=2e-5)


@pytest.mark.parametrize("act", ["none", "gelu", "silu"])
def test_linear_matches_f_linear_with_activation(act: str) -> None:
    x, w, b = torch.randn(3, 5, 24), torch.randn(40, 24), torch.randn(40)
    want = {"none": lambda y: y, "gelu": F.gelu, "silu": F.silu}[act](F.linear(x, w, b))
    with torch.inference_mode():
        assert fused.compute_dtype(x) == torch.float32
        got = fused.linear(x, w, b, act)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bf16_autocast_computes_in_bf16_close_to_fp32() -> None:
    x, w, b = torch.randn(64, 32), torch.randn(48, 32) / 6, torch.randn(48)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused.compute_dtype(x) == torch.bfloat16
        got = fused.linear(x, w, b, "gelu")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), F.gelu(F.linear(x, w, b)), rtol=3e-2, atol=3e-2)


def test_reference_path_where_the_kernels_do_not_apply() -> None:
    x = torch.randn(4, 8)
    assert fused.compute_dtype(x) is None  # autograd is recording
    with torch.inference_mode():
        with fused.reference_kernels():
            assert fused.compute_dtype(x) is None
        assert fused.compute_dtype(x) is not None
        with FlopCounterMode(display=False):
            assert fused.compute_dtype(x) is None
        assert fused.compute_dtype(x.double()) is None
    w = torch.randn(6, 8, requires_grad=True)
    fused.linear(x, w, None, "gelu").sum().backward()  # the reference path keeps gradients
    assert w.grad is not None and w.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="activation"):
        fused.linear(x, w, None, "tanh")


def test_conv2d_equals_autocast_conv_and_casts_the_weight_once() -> None:
    conv = torch.nn.Conv2d(6, 10, kernel_size=3, padding=1, groups=2)
    x = torch.randn(2, 6, 9, 7)
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        want = conv(x)  # autocast casts the weights on every forward
        got = fused.conv2d(conv, x)
        cached = conv._cast_cache[(id(conv.weight), torch.bfloat16)][2]
        again = fused.conv2d(conv, x)
        assert conv._cast_cache[(id(conv.weight), torch.bfloat16)][2] is cached  # kept, not cast again
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(again, want, rtol=0, atol=0)
    with torch.no_grad():  # an in-place update (an optimizer step, load_state_dict) renews the copy
        conv.weight.mul_(2.0)
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        torch.testing.assert_close(fused.conv2d(conv, x), conv(x), rtol=0, atol=0)
    with torch.inference_mode():  # float32: the module's own forward
        torch.testing.assert_close(fused.conv2d(conv, x), conv(x), rtol=0, atol=0)
    y = fused.conv2d(conv, x.requires_grad_())  # autograd: the reference path
    assert y.dtype == torch.float32 and y.requires_grad
