"""The modules that accelerate() swaps in compute their plain modules' functions: the spectral operator against the
float64 scipy reference (oneDNN products, SiLU in the gate's product, the oneDNN heat filter above
FUSED_FILTER_MIN_TOKENS), folded and not; bfloat16 casts kept and renewed; chunked MLPs; whole models with logits
equal to the plain ones, and the plain code free of the kernels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pdevision.fastpath import accelerate, no_fused_kernels
from pdevision.fastpath.kernels import onednn_available
from pdevision.fastpath.modules import FUSED_FILTER_MIN_TOKENS, ChunkedMlp
from pdevision.layers import HeatConductionOperator, MixerBlock
from tests.helpers import needs_bf16_onednn
from tests.layers.test_hco import _randomise, _reference_hco

pytestmark = pytest.mark.skipif(not onednn_available(), reason="PyTorch built without oneDNN")


def test_chunked_mlp_in_inference_equals_whole_map() -> None:
    block = MixerBlock(8, HeatConductionOperator(8)).eval()
    x, fve = torch.randn(2, 7, 9, 8), torch.randn(7, 9, 8)
    with torch.no_grad():
        whole = block(x, fve)
        accelerate(block)
        assert type(block.mlp) is ChunkedMlp
        block.mlp.chunk = 10
        chunked = block(x, fve)
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("folded", [False, True])
def test_fused_inference_path_matches_scipy_reference(folded: bool) -> None:
    """No-grad CPU forward (fused linears, SiLU in the gate's product, the oneDNN heat filter on a map above
    FUSED_FILTER_MIN_TOKENS) against the float64 scipy reference, folded and not."""
    op = HeatConductionOperator(6, dct_method="matrix")
    _randomise(op)
    accelerate(op)
    x, fve = torch.randn(2, 49, 50, 6), torch.randn(49, 50, 6)
    assert 49 * 50 >= FUSED_FILTER_MIN_TOKENS
    want = _reference_hco(op, x, fve)
    if folded:
        op.fold(fve)
    with torch.inference_mode():
        got = op(x, None if folded else fve)
    np.testing.assert_allclose(got.numpy(), want, atol=2e-5)
    if folded:  # new values loaded into k_exp are seen by the cached transposed copy
        with torch.no_grad():
            op.k_exp.mul_(0.5)
        with torch.inference_mode():
            again = op(x)
        assert not torch.allclose(again, got)


@needs_bf16_onednn
def test_folded_bf16_path_keeps_the_decay_cast_once_and_sees_new_values() -> None:
    """Under bfloat16 autocast the folded decay is cast once and multiplied in place: the same logits as the
    reference kernels, the cast kept between calls, renewed when ``k_exp`` changes in place."""
    op = HeatConductionOperator(8, dct_method="matrix")
    _randomise(op)
    accelerate(op)
    x, fve = torch.randn(2, 12, 10, 8), torch.randn(12, 10, 8)
    op.fold(fve)

    def run() -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return op(x).float()

    got = run()
    with no_fused_kernels():
        want = run()
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.02)  # bfloat16 rounding
    cached = op._cast_cache[(id(op.k_exp), torch.bfloat16)][2]
    assert torch.equal(cached, op.k_exp.to(torch.bfloat16))
    run()
    assert op._cast_cache[(id(op.k_exp), torch.bfloat16)][2] is cached  # not cast again
    with torch.no_grad():
        op.k_exp.mul_(0.25)
    again = run()
    assert torch.equal(op._cast_cache[(id(op.k_exp), torch.bfloat16)][2], op.k_exp.to(torch.bfloat16))
    with no_fused_kernels():
        torch.testing.assert_close(again, run(), atol=0.05, rtol=0.02)
    assert not torch.allclose(again, got)
    old = op.k_exp
    op.fold(fve * 2)  # folding again: no cast of the old factors stays cached
    run()
    assert all(entry[0] is not old for entry in op._cast_cache.values())


FAMILIES = ("vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro", "pdeformer_micro")


@pytest.mark.parametrize("name", FAMILIES)
def test_accelerated_model_keeps_state_dict_and_logits(name: str) -> None:
    """The swap changes classes only: the same state dict (keys and tensors, shared), and in inference the same
    logits as the plain model to float32 rounding, folded or not; applying it twice changes nothing."""
    import timm

    from pdevision.fastpath import is_accelerated
    from pdevision.models.factory import fold_for_inference

    torch.manual_seed(0)
    plain = timm.create_model(name, num_classes=5).eval()
    fast = timm.create_model(name, num_classes=5).eval()
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 200, 200)  # vHeat's first stage is 50x50: the fused heat filter runs
    for folded in (False, True):
        if folded:
            fold_for_inference(plain, 200, inplace=True)
            fold_for_inference(fast, 200, inplace=True)
        params, before = list(fast.parameters()), {k: v.clone() for k, v in fast.state_dict().items()}
        accelerate(accelerate(fast))
        assert is_accelerated(fast) and not is_accelerated(plain)
        assert all(p is q for p, q in zip(fast.parameters(), params, strict=True))  # an optimizer's stay valid
        after = fast.state_dict()
        assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())
        with torch.inference_mode():
            want, got = plain(x), fast(x)
            with no_fused_kernels():
                assert torch.equal(fast(x), want) or torch.allclose(fast(x), want, atol=1e-6)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


SMALL_PEERS = {  # ConvNeXt-T's and ViT's blocks (linear MLPs), narrow and shallow
    "convnext_tiny": {"depths": (1, 1, 1, 1), "dims": (16, 32, 64, 128)},
    "vit_tiny_patch16_224": {"depth": 2},
}


@pytest.mark.parametrize("name", SMALL_PEERS)
def test_a_timm_peers_gelu_is_fused_as_ours_are(name: str) -> None:
    """timm's ConvNeXt builds its MLP's activation as timm's own exact ``GELU`` class, which ``accelerate`` left
    unfused while fusing ``nn.GELU`` (this library's, ViT's): ConvNeXt-T ran one more pass over its widest maps than
    the library's models "on the same kernels". Now every first product carries it, with the same logits."""
    import timm
    from torch.profiler import profile

    from pdevision.fastpath.modules import FusedLinear

    torch.manual_seed(0)
    plain = timm.create_model(name, num_classes=3, **SMALL_PEERS[name]).eval()
    fast = timm.create_model(name, num_classes=3, **SMALL_PEERS[name]).eval()
    fast.load_state_dict(plain.state_dict())
    accelerate(fast)
    fc1 = [m for m in fast.modules() if isinstance(m, FusedLinear) and m.act == "gelu"]
    assert fc1 and len(fc1) == sum(type(m).__name__ == "Mlp" for m in plain.modules())
    x = torch.randn(1, 3, 224, 224) if "vit" in name else torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        with profile() as prof:
            got = fast(x)
        want = plain(x)
    assert "aten::gelu" not in {e.key for e in prof.key_averages()}
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_layers_and_models_hold_no_kernel_code() -> None:
    """The plain model code names neither the fast path nor a private torch op (import-linter's layers contract
    also keeps pdevision.fastpath above pdevision.models)."""
    from pathlib import Path

    import pdevision

    root = Path(pdevision.__file__).parent
    banned = ("fastpath", "torch.ops.", "mkldnn", "_linear_pointwise", "cast_cached", "compute_dtype")
    for folder in ("layers", "models"):
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text()
            found = [b for b in banned if b in text.replace("pdevision.fastpath.accelerate", "")]
            assert not found, f"{path.relative_to(root)} names {found}"


@needs_bf16_onednn
@pytest.mark.parametrize("stride", [1, 2])
def test_shared_derivative_bank_runs_in_bf16_as_one_convolution_of_single_channel_images(monkeypatch, stride) -> None:
    from pdevision.layers.hyperbolic import DerivativeConv

    conv = DerivativeConv(6, 4, 4, shared=True, stride=stride)
    torch.nn.init.normal_(conv.weight)
    x = torch.randn(2, 6, 9, 7)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with torch.inference_mode():
        want = conv(x)
        with bf16:
            want_bf16 = conv(x)
    accelerate(torch.nn.Sequential(conv))
    assert type(conv).__name__ == "FusedDerivativeConv"
    with torch.inference_mode():
        torch.testing.assert_close(conv(x), want, rtol=0, atol=0)  # float32: the plain forward
        # bfloat16: the fused form, which never copies the bank into one kernel per channel (the plain forward)
        with monkeypatch.context() as m, bf16:
            m.setattr(DerivativeConv, "kernels", lambda self: pytest.fail("the plain forward ran"))
            got = conv(x)
        assert got.dtype == torch.bfloat16 and got.shape == want_bf16.shape
        torch.testing.assert_close(got.float(), want_bf16.float(), rtol=1e-2, atol=1e-2)
        with no_fused_kernels(), bf16:  # the switch off: the plain forward
            torch.testing.assert_close(conv(x), want_bf16, rtol=0, atol=0)
    unshared = DerivativeConv(6, 4, 4, shared=False)
    accelerate(torch.nn.Sequential(unshared))
    assert type(unshared) is DerivativeConv  # one kernel per channel: left as it is
