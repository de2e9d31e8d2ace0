"""Compiled training (TorchInductor, forward and backward) of every family's micro model."""

from __future__ import annotations

import pytest
import timm
import torch

import pdevision  # noqa: F401


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"])
def test_micro_models_train_under_torch_compile(name: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=4)
    x = torch.randn(2, 3, 64, 64)
    compiled = torch.compile(model)
    loss = compiled(x).logsumexp(-1).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model(x).logsumexp(-1).sum().backward()  # eager reference
    assert grads.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-3, atol=1e-4, msg=n)
