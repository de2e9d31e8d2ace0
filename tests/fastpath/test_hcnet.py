"""HcNet (the authors' network) on the fast path: the NHWC heat step against the plain one at every map size, the
fused block against the plain block in every ``k_mode`` and layout, in float32 and under bfloat16 autocast, the
accelerated model against the authors' recorded logits, and the plain path (NCHW, no oneDNN product) under
``no_fused_kernels``."""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F
from torch.profiler import profile

from pdevision.fastpath import accelerate, kernels, no_fused_kernels
from pdevision.fastpath.modules import FusedHcRaBlock
from pdevision.layers.hcl import HcRaBlock
from pdevision.ops.fdm import neighbour_mean
from tests.helpers import FIXTURES, relative_error, seeded_input, seeded_state

pytestmark = pytest.mark.skipif(not kernels.onednn_available(), reason="PyTorch built without oneDNN")
needs_bf16 = pytest.mark.skipif(
    not kernels.onednn_available(torch.bfloat16), reason="oneDNN's bf16 products need AVX-512 or AMX"
)

SIZES = [(1, 1), (1, 6), (2, 2), (2, 3), (7, 9), (16, 16)]
# the heat step's two ways to the mean of the neighbours: the depthwise convolution on every map, or the sum pool
PATHS = {"conv": 0, "pool": 1 << 62}


def _plain_step(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The plain heat step on NCHW ``x`` (:class:`~pdevision.layers.hcl.NeighbourMeanHeat` plus the block's sum)."""
    return x + alpha * (neighbour_mean(x) - x)


@pytest.mark.parametrize(("h", "w"), SIZES)
@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("path", PATHS)
def test_nhwc_heat_step_equals_the_plain_step(h: int, w: int, per_channel: bool, path: str, monkeypatch) -> None:
    """Corners, edges, one-pixel rows and the one-pixel map (no neighbours: unchanged), alpha per sample and channel
    or one number, by convolution and by pool."""
    monkeypatch.setattr(kernels, "HEAT_CONV_MIN_ELEMENTS", PATHS[path])
    torch.manual_seed(0)
    x = torch.randn(3, 5, h, w)
    alpha = torch.rand(3, 5, 1, 1) if per_channel else torch.tensor(0.3)
    want = _plain_step(x, alpha)
    alpha_nhwc = alpha.permute(0, 2, 3, 1) if per_channel else alpha
    with torch.inference_mode():
        got = kernels.neighbour_heat_nhwc(x.permute(0, 2, 3, 1).contiguous(), alpha_nhwc)
    assert got.is_contiguous()
    torch.testing.assert_close(got.permute(0, 3, 1, 2), want, rtol=1e-6, atol=1e-6)
    if h * w == 1:
        assert torch.equal(got.permute(0, 3, 1, 2), x)


@needs_bf16
@pytest.mark.parametrize(("h", "w"), SIZES)
@pytest.mark.parametrize("path", PATHS)
def test_nhwc_heat_step_in_bf16_equals_the_float32_step_to_bf16_rounding(
    h: int, w: int, path: str, monkeypatch
) -> None:
    """A bfloat16 map (what the stem and the blocks hand on under autocast), alpha per sample and channel in bfloat16
    or one float32 number (the learnable mode's sigmoid): a bfloat16 result within 2% of the float32 step on the same
    (bfloat16) values, by convolution and by pool."""
    monkeypatch.setattr(kernels, "HEAT_CONV_MIN_ELEMENTS", PATHS[path])
    torch.manual_seed(8)
    x = torch.randn(3, 5, h, w).to(torch.bfloat16)
    for alpha in (torch.rand(3, 5, 1, 1).to(torch.bfloat16), torch.tensor(0.3)):
        want = _plain_step(x.float(), alpha.float())
        alpha_nhwc = alpha.permute(0, 2, 3, 1) if alpha.ndim else alpha
        with torch.inference_mode():
            got = kernels.neighbour_heat_nhwc(x.permute(0, 2, 3, 1).contiguous(), alpha_nhwc)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.permute(0, 3, 1, 2).float(), want, rtol=2e-2, atol=2e-2)


def test_the_heat_step_takes_the_convolution_on_large_maps_and_the_pool_on_small_ones() -> None:
    """The threshold is in elements of the map; either side, the step equals the plain one (a map of HcNet-T's first
    stage at 224 px above it, one of its last stage below)."""
    for shape, op in (((1, 64, 56, 56), "aten::mkldnn_convolution"), ((1, 512, 7, 7), "aten::avg_pool2d")):
        torch.manual_seed(1)
        x, alpha = torch.randn(shape), torch.rand(shape[0], shape[1], 1, 1)
        with torch.inference_mode(), profile() as prof:
            got = kernels.neighbour_heat_nhwc(x.permute(0, 2, 3, 1).contiguous(), alpha.permute(0, 2, 3, 1))
        assert op in {e.key for e in prof.key_averages()}
        torch.testing.assert_close(got.permute(0, 3, 1, 2), _plain_step(x, alpha), rtol=1e-6, atol=1e-6)


def test_inverse_neighbour_count_is_made_once_per_size() -> None:
    """The count's inverse is one tensor per map size and dtype (not remade each call), 1/3 at corners, 1/5 on edges,
    1/8 inside, and usable outside inference mode though first made inside it."""
    with torch.inference_mode():
        first = kernels._inverse_neighbour_count(4, 5, torch.float32)
    assert kernels._inverse_neighbour_count(4, 5, torch.float32) is first
    assert not first.is_inference()
    assert first.shape == (1, 4, 5, 1)
    assert first[0, 0, 0, 0] == pytest.approx(1 / 3) and first[0, 0, 2, 0] == pytest.approx(1 / 5)
    assert first[0, 1, 1, 0] == pytest.approx(1 / 8)


def test_linear_add_fuses_the_sum_in_inference_only() -> None:
    x, w, b, other = torch.randn(2, 3, 4, 16), torch.randn(8, 16), torch.randn(8), torch.randn(2, 3, 4, 8)
    want = other + F.linear(x, w, b)
    with torch.inference_mode():
        torch.testing.assert_close(kernels.linear_add(x, w, b, other), want, rtol=1e-5, atol=1e-5)
    w.requires_grad_(True)
    got = kernels.linear_add(x, w, b, other)  # autograd: the plain sum, which records the graph
    assert got.grad_fn is not None
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_bf16
def test_linear_add_fuses_the_sum_in_bf16_when_every_operand_is_bf16() -> None:
    """Under bfloat16 autocast with bfloat16 operands: oneDNN's product with the sum as its post-op (one bfloat16
    output, the sum rounded once); with a float32 residual the plain sum, in float32 (the promoted dtype)."""
    torch.manual_seed(5)
    x, w, b = torch.randn(2, 3, 4, 16), torch.randn(8, 16), torch.randn(8)
    other = torch.randn(2, 3, 4, 8)
    want = other + F.linear(x, w, b)
    bf = torch.bfloat16
    with torch.inference_mode(), torch.autocast("cpu", dtype=bf):
        with profile() as prof:
            fused = kernels.linear_add(x.to(bf), w.to(bf), b.to(bf), other.to(bf))
        mixed = kernels.linear_add(x.to(bf), w.to(bf), b.to(bf), other)
    assert "mkldnn::_linear_pointwise" in {e.key for e in prof.key_averages()}
    assert fused.dtype == bf and mixed.dtype == torch.float32
    assert relative_error(fused.float(), want) < 1e-2 and relative_error(mixed, want) < 1e-2


def _blocks(dim: int, **options: object) -> tuple[HcRaBlock, HcRaBlock]:
    plain = HcRaBlock(dim, mlp_ratio=2.0, **options).eval()
    for p in plain.parameters():  # away from the initialisation's near-zero projection (alpha 0.5 everywhere)
        p.data.normal_(0.0, 0.3)
    fast = HcRaBlock(dim, mlp_ratio=2.0, **options).eval()
    fast.load_state_dict(plain.state_dict())
    accelerate(fast)
    return plain, fast


@pytest.mark.parametrize(
    "options",
    [{}, {"k_mode": "learnable", "k_init": 0.3}, {"k_mode": "fixed", "k_init": 0.7}, {"ra_filter": False}],
    ids=["input", "learnable", "fixed", "no-filter"],
)
@pytest.mark.parametrize(("h", "w"), SIZES)
@pytest.mark.parametrize("channels_last", [True, False])
def test_fused_block_equals_the_plain_block(options: dict, h: int, w: int, channels_last: bool) -> None:
    """Every k_mode, with and without the RaL filter, every map size, input in either memory layout: the same output,
    returned in channels-last memory (what the next block reads without a copy)."""
    torch.manual_seed(1)
    plain, fast = _blocks(6, **options)
    assert type(fast) is FusedHcRaBlock
    x = torch.randn(3, 6, h, w)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        want, got = plain(x), fast(x)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_bf16
@pytest.mark.parametrize(
    "options",
    [{}, {"k_mode": "learnable", "k_init": 0.3}, {"k_mode": "fixed", "k_init": 0.7}, {"ra_filter": False}],
    ids=["input", "learnable", "fixed", "no-filter"],
)
@pytest.mark.parametrize(("h", "w"), [(1, 1), (2, 3), (7, 9)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16-input", "fp32-input"])
def test_fused_block_equals_the_plain_block_under_bf16_autocast(
    options: dict, h: int, w: int, dtype: torch.dtype
) -> None:
    """Under bfloat16 autocast the fused block computes in bfloat16 on NHWC memory (its products on oneDNN) and gives
    the plain block's output to bfloat16 rounding: both within 2% (relative, over the whole output) of the float32
    block, and of each other, in the plain block's output dtype (bfloat16 for a bfloat16 input, as the stem hands on;
    float32 for a float32 input, whose residual sums autocast leaves in float32)."""
    torch.manual_seed(6)
    plain, fast = _blocks(6, **options)
    x = torch.randn(3, 6, h, w).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        exact = plain(x.to(dtype).float())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = plain(x.to(dtype))
            fast(x.to(dtype))  # the first call at a size makes the neighbour count's inverse
            with profile() as prof:
                got = fast(x.to(dtype))
    assert got.dtype == want.dtype == dtype
    assert got.is_contiguous(memory_format=torch.channels_last)
    ops = {e.key for e in prof.key_averages()}
    assert "mkldnn::_linear_pointwise" in ops and "aten::where" not in ops  # the NHWC path, not the plain one
    assert relative_error(want.float(), exact) < 2e-2
    assert relative_error(got.float(), exact) < 2e-2
    assert relative_error(got.float(), want.float()) < 2e-2


def test_fused_block_runs_the_plain_forward_where_the_kernels_do_not_apply() -> None:
    """Autograd, training mode and no_fused_kernels: the plain forward, bit for bit; gradients flow."""
    torch.manual_seed(2)
    plain, fast = _blocks(4)
    x = torch.randn(2, 4, 5, 6, requires_grad=True)
    assert torch.equal(fast(x), plain(x))
    fast(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    with torch.no_grad(), no_fused_kernels():
        assert torch.equal(fast(x), plain(x))
    plain.train(), fast.train()
    with torch.no_grad():
        assert torch.equal(fast(x), plain(x))  # no drop path here: training mode alone takes the plain forward


def test_a_block_whose_activation_is_not_the_exact_gelu_keeps_its_plain_forward() -> None:
    """The fused block computes the RaL's GELU as a post-op: a RaL built with another activation is left as it is
    (it would have been computed as GELU), and keeps its logits."""
    torch.manual_seed(4)
    block = HcRaBlock(4, mlp_ratio=2.0).eval()
    block.mlp.act = torch.nn.ReLU()
    x = torch.randn(1, 4, 6, 6)
    with torch.inference_mode():
        want = block(x)
        accelerate(block)
        assert type(block) is HcRaBlock
        assert torch.equal(block(x), want)


def test_accelerated_block_traces_to_the_plain_graph() -> None:
    """torch.fx (timm's and torchvision's feature extraction) traces the plain forward of an accelerated block."""
    torch.manual_seed(4)
    plain, fast = _blocks(4)
    graph = torch.fx.symbolic_trace(fast)
    assert not any("linear" in str(node.target) for node in graph.graph.nodes)
    x = torch.randn(2, 4, 6, 5)
    with torch.inference_mode():
        torch.testing.assert_close(graph(x), plain(x))


def _ops(model: torch.nn.Module, x: torch.Tensor, bf16: bool = False) -> tuple[set[str], int]:
    """The operators one forward runs after a first one (under bfloat16 autocast with ``bf16``), and how many of its
    convolutions have 1x1 kernels."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        model(x)
        with profile(record_shapes=True) as prof:
            model(x)
    events = prof.key_averages(group_by_input_shape=True)
    pointwise = sum(e.count for e in events if e.key == "aten::convolution" and e.input_shapes[1][2:] == [1, 1])
    return {e.key for e in events}, pointwise


def test_accelerated_hcnet_runs_on_onednn_and_plain_under_no_fused_kernels() -> None:
    """Accelerated: the RaL's and alpha's 1x1 convolutions are oneDNN products (no 1x1 convolution left), its GELU
    their post-op, the heat step pools once (no neighbour count made per block). Under no_fused_kernels the same
    model runs the plain NCHW code: three 1x1 convolutions and a pooled count per block, no oneDNN product."""
    torch.manual_seed(3)
    model = accelerate(timm.create_model("hcnet_micro", num_classes=4).eval())
    blocks = sum(isinstance(m, FusedHcRaBlock) for m in model.modules())
    x = torch.randn(1, 3, 64, 64)
    fast, pointwise = _ops(model, x)
    assert "mkldnn::_linear_pointwise" in fast and "aten::where" not in fast and pointwise == 0
    with torch.inference_mode(), profile() as prof:
        model(x)
    gelus = sum(e.count for e in prof.key_averages() if e.key == "aten::gelu")
    assert gelus == 1  # the stem's: the RaL's GELU is its first product's post-op, in float32 too
    with no_fused_kernels():
        plain, pointwise = _ops(model, x)
    assert "mkldnn::_linear_pointwise" not in plain
    assert "aten::where" in plain and pointwise == 3 * blocks == 18  # the plain neighbour mean, k_proj, fc1, fc2


@needs_bf16
def test_accelerated_hcnet_under_bf16_autocast_runs_its_blocks_on_onednn_and_equals_the_plain_model() -> None:
    """Under bfloat16 autocast (as ``pdevision bench --dtype bf16``) the accelerated blocks run on NHWC memory: no 1x1
    convolution left, no neighbour count made per block; the logits equal the plain model's under
    autocast to bfloat16 rounding (within 3%, relative, as the plain model's own bfloat16 logits are of its float32
    ones)."""
    torch.manual_seed(7)
    plain = timm.create_model("hcnet_micro", num_classes=10).eval()
    for p in plain.parameters():  # away from the initialisation (near-zero projections, alpha 0.5 everywhere)
        if p.ndim > 1:
            p.data.normal_(0.0, 0.1)
    model = timm.create_model("hcnet_micro", num_classes=10).eval()
    model.load_state_dict(plain.state_dict())
    accelerate(model)
    x = torch.randn(1, 3, 64, 72)
    fast, pointwise = _ops(model, x, bf16=True)
    assert "mkldnn::_linear_pointwise" in fast and "aten::where" not in fast and pointwise == 0
    with torch.inference_mode():
        exact = plain(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want, got = plain(x), model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert relative_error(want.float(), exact) < 3e-2
    assert relative_error(got.float(), exact) < 3e-2
    assert relative_error(got.float(), want.float()) < 3e-2


@pytest.mark.parametrize("size", [64, 96])
def test_accelerated_micro_logits_equal_the_authors(size: int) -> None:
    """The authors' micro checkpoint, accelerated: their recorded logits (as tests/models/test_hcnet_reference.py
    holds for the plain model)."""
    ref = torch.load(FIXTURES / "hcnet_ref_micro.pth", weights_only=True)
    cfg = ref["config"]
    overlay = dict(file=str(FIXTURES / "hcnet_ref_micro.pth"), num_classes=cfg["num_classes"])
    model = timm.create_model(
        "hcnet_micro",
        pretrained=True,
        pretrained_cfg_overlay=overlay,
        dims=tuple(cfg["embed_dim"]),
        depths=tuple(cfg["depths"]),
        num_classes=cfg["num_classes"],
    ).eval()
    accelerate(model)
    x = seeded_input((2, 3, size, size), ref["input_seed"] + size)
    with torch.inference_mode():
        assert relative_error(model(x), ref[f"logits_{size}"]) < 1e-5


def test_accelerated_authors_default_logits_equal_theirs() -> None:
    """The authors' default configuration (widths 64-320-512) with their recorded seeded weights, accelerated."""
    from pdevision.models.hcnet import checkpoint_filter_fn

    full = torch.load(FIXTURES / "hcnet_ref_full.pth", weights_only=True)
    ref = full["models"]["hcnet_authors_default"]
    model = timm.create_model("hcnet_authors_default").eval()
    model.load_state_dict(checkpoint_filter_fn(seeded_state(ref["shapes"], full["state_seed"]), model), strict=True)
    accelerate(model)
    with torch.inference_mode():
        out = model(seeded_input((1, 3, 160, 160), full["input_seed"]))
    assert relative_error(out, ref["logits_160"]) < 1e-5
