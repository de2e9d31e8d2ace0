"""Inference folding (fold_for_inference: decay factors, PDE-ResNet's BatchNorms), then the CPU kernels
(pdevision.fastpath.accelerate), keeps the logits of the unfolded reference model within 1e-4 and the state-dict keys
unchanged."""

from __future__ import annotations

import pytest
import timm
import torch

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench import count_macs
from pdevision.fastpath import accelerate, no_fused_kernels
from pdevision.fastpath.kernels import onednn_available
from pdevision.fastpath.modules import FusedLinear
from pdevision.models.factory import fold_for_inference


@pytest.mark.parametrize(
    ("name", "img_size", "kwargs"),
    [
        ("vheat_micro", 192, {}),
        ("waveformer_micro", 64, {}),
        ("hcnet_micro", 64, {}),
        ("hcnet_library_micro", 64, {}),
        ("pderesnet_micro", 64, {}),
    ],
)
def test_folded_logits_match_unfolded_reference(name: str, img_size: int, kwargs: dict) -> None:
    model = timm.create_model(name, num_classes=10, **kwargs).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so folding them is exercised
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, img_size, img_size)
    keys = set(model.state_dict())
    with torch.inference_mode():
        want = model(x)
    folded = fold_for_inference(model, img_size)
    if hasattr(folded, "fold_batchnorm"):  # PDE-ResNet: as the benchmark folds it
        folded.fold_batchnorm()
    accelerate(folded)
    with torch.inference_mode():
        got = folded(x)
        with no_fused_kernels():
            got_reference = folded(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    torch.testing.assert_close(got_reference, want, rtol=0, atol=1e-4)
    if name != "pderesnet_micro":  # BatchNorm folding rewrites PDE-ResNet's blocks; the others keep every key
        assert set(folded.state_dict()) - {k for k in folded.state_dict() if k.endswith("k_exp")} == keys
    if model.output_fmt == "NHWC":  # the fused MLP linears of channels-last stages (the NCHW HcNet has none)
        assert any(isinstance(m, FusedLinear) and m.act == "gelu" for m in folded.modules())
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        got_bf16 = folded(x).float()
    assert torch.isfinite(got_bf16).all()
    assert (got_bf16 - want).abs().max() < 0.1 * want.abs().max() + 0.05


@pytest.mark.skipif(not onednn_available(), reason="PyTorch built without oneDNN")
def test_fused_model_trains_as_before_and_counts_the_same_macs() -> None:
    """Accelerated linears keep autograd and the FLOP counter sees the plain operators."""
    model = timm.create_model("vheat_micro", num_classes=4)
    macs = count_macs(model, 64)
    folded = accelerate(fold_for_inference(model, 64))
    assert count_macs(folded, 64) == macs
    folded.train()
    loss = folded(torch.randn(2, 3, 64, 64)).square().mean()
    loss.backward()
    assert all(p.grad is not None for n, p in folded.named_parameters() if "mlp.fc1" in n)


@pytest.mark.parametrize(
    ("name", "kwargs", "dtype"),
    [
        ("vheat_micro", {}, torch.float32),
        ("vheat_micro", {}, torch.bfloat16),
        ("hcnet_micro", {}, torch.float32),  # the authors' NCHW network
        ("hcnet_micro", {}, torch.bfloat16),
        ("hcnet_library_micro", {}, torch.float32),
        ("hcnet_library_micro", {}, torch.bfloat16),
    ],
)
def test_folded_forward_copies_no_convolution_weight(name: str, kwargs: dict, dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16 and not onednn_available(torch.bfloat16):
        pytest.skip("this CPU's oneDNN has no bfloat16 inner product (AVX-512 or AMX needed)")
    """The stem's and the downsampling convolutions read channels-last maps; accelerate puts their weights in that
    layout, so the convolution does not copy them to it on every forward (seen in the profile of vHeat-T)."""
    from torch.profiler import ProfilerActivity, profile

    folded = accelerate(fold_for_inference(timm.create_model(name, num_classes=10, **kwargs).eval(), 64))
    weights = {tuple(m.weight.shape) for m in folded.modules() if isinstance(m, torch.nn.Conv2d) and m.groups == 1}
    assert len(weights) >= 4  # two stem convolutions and the downsampling ones
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        folded(x)  # the bfloat16 weights are cast once, on the first call
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            folded(x)
    copied = {tuple(e.input_shapes[0]) for e in prof.events() if e.name == "aten::copy_" and e.input_shapes}
    assert not copied & weights, f"convolution weights copied on every forward: {sorted(copied & weights)}"
