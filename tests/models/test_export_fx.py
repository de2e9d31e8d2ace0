"""FX-traced vHeat equals eager vHeat bit for bit (timm's FX tests and feature_cls="fx" compare with ==), plain and
on the CPU kernels (pdevision.fastpath.accelerate).

The kernels are chosen when the graph runs, not when it is traced (`kernels.linear` and the fused filter are FX
leaves), so eager and traced models run the same kernels on the same values.
"""

from __future__ import annotations

import pytest
import timm
import torch
from timm.models import get_notrace_functions, get_notrace_modules
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

import pdevision  # noqa: F401
from pdevision.fastpath import accelerate, kernels


def _traced(model: torch.nn.Module) -> torch.nn.Module:
    """The model's output node through torchvision's FX feature extractor, with timm's tracer arguments."""
    kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
    train_nodes, eval_nodes = get_graph_node_names(model, tracer_kwargs=kwargs)
    return create_feature_extractor(
        model, train_return_nodes=[train_nodes[-1]], eval_return_nodes=[eval_nodes[-1]], tracer_kwargs=kwargs
    )


def _run(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    return next(iter(out.values())) if isinstance(out, dict) else out


@pytest.mark.parametrize("fast", [False, True])
def test_fx_traced_vheat_is_bitwise_eager_in_eval(fast: bool) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vheat_micro", num_classes=5).eval()
    if fast:
        accelerate(model)
    traced = _traced(model).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():  # (as timm's test_model_forward_fx): the inference kernels run
        assert kernels.compute_dtype(x) is not None
        assert torch.equal(_run(traced, x), model(x))


@pytest.mark.slow
def test_fx_traced_folded_vheat_is_bitwise_eager_with_the_fused_heat_filter() -> None:
    torch.manual_seed(0)
    model = accelerate(timm.create_model("vheat_micro", num_classes=5).eval())
    x = torch.randn(1, 3, 200, 200)  # stage 1 is 50x50, where the fused heat filter runs
    for folded in (False, True):
        if folded:  # decay factors folded for this size
            model.reparameterize(img_size=200)
        traced = _traced(model).eval()
        with torch.no_grad():
            assert torch.equal(_run(traced, x), model(x))
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(_run(traced, x), model(x))


def test_fx_traced_vheat_is_bitwise_eager_in_train_mode() -> None:
    # No stochastic depth: timm's drop_path scales its mask in place (`div_`), a call whose result is unused, which
    # the FX graph's dead-code pass removes (any timm model traced this way drops unscaled).
    torch.manual_seed(0)
    model = accelerate(timm.create_model("vheat_micro", num_classes=5, drop_path_rate=0.0).train())
    traced = _traced(model).train()
    x = torch.randn(2, 3, 64, 64)
    out = model(x)  # float32 training: the linear layers' forward and gradient products run on oneDNN
    out_fx = _run(traced, x)
    assert torch.equal(out_fx, out)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    grads_fx = torch.autograd.grad(out_fx.square().sum(), list(model.parameters()))
    for g, g_fx in zip(grads, grads_fx, strict=True):
        assert torch.equal(g, g_fx)
