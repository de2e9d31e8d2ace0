"""The oneDNN kernels (inference, and float32 training of linear layers) compute the reference functions (scipy's DCT,
F.linear and its gradients) and step aside where they must (autograd in inference kernels, autocast in training,
no_fused_kernels, dispatch modes such as the FLOP counter)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from pdevision.fastpath import kernels
from pdevision.fastpath.modules import FusedConv2d
from tests.helpers import needs_bf16_onednn

pytestmark = pytest.mark.skipif(not kernels.onednn_available(), reason="PyTorch built without oneDNN")


@pytest.mark.parametrize("shape", [(2, 29, 31, 6), (1, 40, 33, 16)])
def test_heat_filter_matches_scipy_dctn(shape: tuple[int, int, int, int]) -> None:
    _, h, w, c = shape
    u = torch.randn(shape)
    decay = torch.rand(h, w, c)
    with torch.inference_mode():
        got = kernels.heat_filter_nhwc(u, decay.transpose(0, 1).contiguous())
    spec = scipy.fft.dctn(u.double().numpy(), type=2, norm="ortho", axes=(1, 2))
    want = scipy.fft.idctn(spec * decay.double().numpy(), type=2, norm="ortho", axes=(1, 2))
    np.testing.assert_allclose(got.numpy(), want, atol=2e-5)


@pytest.mark.parametrize("act", ["none", "gelu", "silu"])
def test_linear_matches_f_linear_with_activation(act: str) -> None:
    x, w, b = torch.randn(3, 5, 24), torch.randn(40, 24), torch.randn(40)
    want = {"none": lambda y: y, "gelu": F.gelu, "silu": F.silu}[act](F.linear(x, w, b))
    with torch.inference_mode():
        assert kernels.compute_dtype(x) == torch.float32
        got = kernels.linear(x, w, b, act)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_bf16_onednn
def test_bf16_autocast_computes_in_bf16_close_to_fp32() -> None:
    x, w, b = torch.randn(64, 32), torch.randn(48, 32) / 6, torch.randn(48)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernels.compute_dtype(x) == torch.bfloat16
        got = kernels.linear(x, w, b, "gelu")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), F.gelu(F.linear(x, w, b)), rtol=3e-2, atol=3e-2)


def test_reference_path_where_the_kernels_do_not_apply() -> None:
    x = torch.randn(4, 8)
    assert kernels.compute_dtype(x) is None  # autograd is recording
    with torch.inference_mode():
        with kernels.no_fused_kernels():
            assert kernels.compute_dtype(x) is None
        assert kernels.compute_dtype(x) is not None
        with FlopCounterMode(display=False):
            assert kernels.compute_dtype(x) is None
        assert kernels.compute_dtype(x.double()) is None
    w = torch.randn(6, 8, requires_grad=True)
    kernels.linear(x, w, None, "gelu").sum().backward()  # the reference path keeps gradients
    assert w.grad is not None and w.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="activation"):
        kernels.linear(x, w, None, "tanh")


@needs_bf16_onednn
def test_fused_conv2d_equals_autocast_conv_and_casts_the_weight_once() -> None:
    conv = torch.nn.Conv2d(6, 10, kernel_size=3, padding=1, groups=2)
    fast = torch.nn.Conv2d(6, 10, kernel_size=3, padding=1, groups=2)
    fast.load_state_dict(conv.state_dict())
    fast.__class__ = FusedConv2d
    x = torch.randn(2, 6, 9, 7)
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        want = conv(x)  # autocast casts the weights on every forward
        got = fast(x)
        cached = fast._cast_cache[(id(fast.weight), torch.bfloat16)][2]
        again = fast(x)
        assert fast._cast_cache[(id(fast.weight), torch.bfloat16)][2] is cached  # kept, not cast again
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(again, want, rtol=0, atol=0)
    with torch.no_grad():  # an in-place update (an optimizer step, load_state_dict) renews the copy
        conv.weight.mul_(2.0)
        fast.weight.mul_(2.0)
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        torch.testing.assert_close(fast(x), conv(x), rtol=0, atol=0)
    with torch.inference_mode():  # float32: the module's own forward
        torch.testing.assert_close(fast(x), conv(x), rtol=0, atol=0)
    y = fast(x.requires_grad_())  # autograd: the plain path
    assert y.dtype == torch.float32 and y.requires_grad


def _grads(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, act: str, reference: bool) -> list[torch.Tensor]:
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in (x, w, b) if t is not None]
    xl, wl, bl = leaves[0], leaves[1], (leaves[2] if b is not None else None)
    with kernels.no_fused_kernels() if reference else torch.enable_grad():
        y = kernels.linear(xl, wl, bl, act)
    weight = torch.linspace(-1, 1, y.numel()).reshape(y.shape)  # a loss whose gradient is not constant
    (y * weight).sum().backward()
    return [y.detach()] + [t.grad for t in leaves if t.requires_grad]


@pytest.mark.parametrize(
    ("x_shape", "out", "bias", "act", "x_grad"),
    [
        ((37, 24), 96, True, "none", True),  # widening: the weight gradient in the transposed orientation
        ((2, 5, 7, 96), 24, True, "gelu", True),  # narrowing, 4-D tokens
        ((3, 11, 16), 16, False, "silu", False),  # square, no bias, an input without gradient (the first layer)
    ],
)
def test_float32_training_runs_on_onednn_with_the_reference_gradients(
    x_shape: tuple[int, ...], out: int, bias: bool, act: str, x_grad: bool
) -> None:
    torch.manual_seed(0)
    x = torch.randn(x_shape, requires_grad=x_grad)
    w = (torch.randn(out, x_shape[-1]) / x_shape[-1] ** 0.5).requires_grad_()
    b = torch.randn(out).requires_grad_() if bias else None
    with torch.enable_grad():
        y = kernels.linear(x, w, b)
    assert "TrainingLinear" in type(y.grad_fn).__name__  # the oneDNN products, not addmm
    got, want = _grads(x, w, b, act, reference=False), _grads(x, w, b, act, reference=True)
    assert len(got) == len(want) == 1 + x_grad + 1 + bias
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_training_kernel_steps_aside_where_it_must() -> None:
    x, w = torch.randn(4, 8), torch.randn(6, 8, requires_grad=True)
    with kernels.no_fused_kernels():
        assert "TrainingLinear" not in type(kernels.linear(x, w, None).grad_fn).__name__
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast's bf16 products are oneDNN's already
        assert kernels.linear(x, w, None).dtype == torch.bfloat16
    assert "TrainingLinear" not in type(kernels.linear(x.double(), w.double(), None).grad_fn).__name__
    with FlopCounterMode(display=False) as counter:
        kernels.linear(x, w, None).sum().backward()
    assert counter.get_total_flops() == 2 * 2 * 4 * 8 * 6  # the reference forward and weight gradient, counted
    for empty in (torch.randn(0, 8), torch.randn(2, 0, 8)):  # an empty batch: the reference product, no error
        y = kernels.linear(empty.requires_grad_(), w, torch.zeros(6, requires_grad=True))
        y.sum().backward()
        assert y.shape == (*empty.shape[:-1], 6) and empty.grad is not None and empty.grad.shape == empty.shape
    _, jv = torch.func.jvp(lambda t: kernels.linear(t, w, None), (x,), (torch.ones_like(x),))  # torch.func works
    torch.testing.assert_close(jv, torch.ones_like(x) @ w.detach().T)
    y = kernels.linear(x.requires_grad_(), w, None)
    (g,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):  # second derivatives: a clear refusal
        g.sum().backward()


def _graph_nodes(t: torch.Tensor, kind: str) -> int:
    """How many nodes of ``t``'s autograd graph have ``kind`` in their name."""
    seen, stack, count = set(), [t.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        count += kind in type(node).__name__
        stack.extend(n for n, _ in node.next_functions)
    return count


@pytest.mark.parametrize("name", ["vheat_micro", "hcnet_micro", "convnext_atto"])
def test_a_training_step_on_the_kernels_gives_the_reference_gradients(name: str) -> None:
    """accelerate (what the training loop applies on the CPU) keeps a model's loss and every gradient."""
    import copy

    import timm

    import pdevision  # noqa: F401  (registers the models)
    from pdevision.fastpath import accelerate, is_accelerated

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5, **({} if "convnext" in name else {"img_size": 32}))
    fast = copy.deepcopy(model)
    assert is_accelerated(accelerate(fast))
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 3])
    losses, grads = [], []
    for m, reference in ((model, True), (fast, False)):
        torch.manual_seed(1)  # the same stochastic depth, if any
        with kernels.no_fused_kernels() if reference else torch.enable_grad():
            loss = F.cross_entropy(m.train()(x), y)
        assert (_graph_nodes(loss, "TrainingLinear") > 0) is not reference
        loss.backward()
        losses.append(loss.detach())
        grads.append({k: p.grad for k, p in m.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == len(list(model.parameters()))
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=1e-4, rtol=1e-3, msg=k)


def test_fused_optimizer_supported_only_for_floating_cpu_or_cuda_parameters() -> None:
    assert kernels.fused_optimizer_supported([torch.zeros(3), torch.zeros(2, dtype=torch.bfloat16)])
    assert not kernels.fused_optimizer_supported([torch.zeros(3), torch.zeros(2, dtype=torch.long)])
    assert not kernels.fused_optimizer_supported([torch.zeros(3, device="meta")])
