"""The PDE operators as token mixers inside timm's MetaFormer: each equals the operator it wraps, and builds, runs
and trains inside the unchanged skeleton."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from timm.models.metaformer import MetaFormer, SepConv

from pdevision.layers import HeatConductionMixer, HyperbolicBlock
from pdevision.layers.mixers import (
    AvgPoolMixer,
    DepthwiseMixer,
    HcLMixer,
    HeatMixer,
    HyperbolicMixer,
    PointwiseMixer,
    WaveMixer,
    mixer_fve,
)
from pdevision.layers.spectral import spectral_filter
from pdevision.models.factory import ModelArgumentError, create_model
from pdevision.ops.heat import resize_spectrum

PDE = [HeatMixer, WaveMixer, HcLMixer, HyperbolicMixer]


@pytest.mark.parametrize("cls", PDE, ids=lambda c: c.__name__)
def test_builds_in_timm_metaformer_any_size_and_gradients(cls: type) -> None:
    torch.manual_seed(0)
    kwargs = {"fve_size": 4} if cls in (HeatMixer, WaveMixer) else {}
    model = MetaFormer(num_classes=3, depths=(1, 1), dims=(8, 16), token_mixers=cls, use_mlp_head=False, **kwargs)
    assert isinstance(model.stages[0].blocks[0].token_mixer, cls) and model.stages[0].use_nchw
    for size in ((37, 50), (64, 64)):
        x = torch.randn(2, 3, *size)
        out = model(x)
        assert out.shape == (2, 3) and torch.isfinite(out).all()
    out.sum().backward()
    mixer = model.stages[1].blocks[0].token_mixer
    grads = [p.grad for p in mixer.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


def test_spectral_mixers_equal_their_operator_on_the_resampled_fve() -> None:
    torch.manual_seed(0)
    for cls in (HeatMixer, WaveMixer):
        mixer = cls(dim=6, fve_size=5).eval()
        with torch.no_grad():
            mixer.freq_embed.normal_(0, 0.5)
        x = torch.randn(2, 6, 9, 7)
        fve = resize_spectrum(mixer.freq_embed, (9, 7), "interp")
        expected = mixer.op(x.permute(0, 2, 3, 1), fve).permute(0, 3, 1, 2)
        torch.testing.assert_close(mixer(x), expected, rtol=0, atol=0)
        # at the grid's own size the embedding is used as is
        same = torch.randn(1, 6, 5, 5)
        assert torch.equal(mixer_fve(mixer.freq_embed, same), mixer.freq_embed)


def test_wave_and_heat_mixers_differ_only_in_the_transfer() -> None:
    heat, wave = HeatMixer(dim=4, fve_size=3), WaveMixer(dim=4, fve_size=3)
    assert set(heat.op.state_dict()) - set(wave.op.state_dict()) == set()
    assert set(wave.op.state_dict()) - set(heat.op.state_dict()) == {"c", "alpha"}
    assert isinstance(heat.op.to_k[1], torch.nn.ReLU) and isinstance(wave.op.to_k[1], torch.nn.GELU)


def test_hcl_mixer_is_hcnets_mixer_on_nchw() -> None:
    torch.manual_seed(0)
    mixer = HcLMixer(dim=5)
    ref = HeatConductionMixer(5)
    ref.load_state_dict({k.removeprefix("mixer."): v for k, v in mixer.state_dict().items()})
    x = torch.randn(2, 5, 6, 7)
    torch.testing.assert_close(mixer(x), ref(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


def test_hyperbolic_mixer_is_the_blocks_branch_without_its_shortcut() -> None:
    torch.manual_seed(0)
    mixer = HyperbolicMixer(dim=8, equation="eq3").eval()
    block = HyperbolicBlock(8, 8, equation="eq3", projection=False).eval()
    block.load_state_dict({k.removeprefix("block."): v for k, v in mixer.state_dict().items()})
    with torch.no_grad():  # non-trivial BatchNorm statistics and scales
        for bn in (block.norm, block.norm_deriv, mixer.block.norm, mixer.block.norm_deriv):
            bn.weight.fill_(0.7)
            bn.running_var.fill_(2.0)
    x = torch.randn(2, 8, 9, 10)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x), block(x) - x)


def test_mixer_arguments_dropout_and_placement() -> None:
    mixer = HeatMixer(dim=4, proj_drop=0.5, fve_size=3, dtype=torch.float64)
    assert mixer.freq_embed.dtype == torch.float64 and mixer.proj_drop.p == 0.5
    for bad in (0, 257, True, 8.0):  # 257: a grid beyond a 4096 px map at stride 16 allocates gigabytes
        with pytest.raises(ValueError, match="fve_size must be an integer from 1 to 256"):
            HeatMixer(dim=4, fve_size=bad)
    with pytest.raises(ValueError, match="k_mode"):
        HeatMixer(dim=4, k_mode="bogus")


def test_folding_through_timm_keeps_the_function() -> None:
    torch.manual_seed(0)
    model = timm.create_model("pdeformer_micro", mixer="wave", dims=8, depths=(1, 1, 1, 1), num_classes=4).eval()
    x = torch.randn(2, 3, 48, 40)
    with torch.no_grad():
        before = model(x)
        timm.utils.model.reparameterize_model(model)
        after = model(x)
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


# -- the initialisations and controls of the mixer comparison (benchmarks/archive/pathfinder_mixers) ------------------
def _numpy_radius(h: int, w: int) -> np.ndarray:
    """``|w|`` on the DCT grid, ``w_n = n pi / N``, written independently of pdevision.ops."""
    wy, wx = np.arange(h) * np.pi / h, np.arange(w) * np.pi / w
    return np.sqrt(wy[:, None] ** 2 + wx[None, :] ** 2)


def _zero_projection(op: torch.nn.Module) -> None:
    with torch.no_grad():
        op.to_k[0].weight.zero_()
        op.to_k[0].bias.zero_()


def test_heat_k_init_in_the_fve_mode_is_the_diffusivity_at_step_zero() -> None:
    op = HeatMixer(dim=3, fve_size=6, k_init=0.035).op
    _zero_projection(op)
    fve = torch.randn(6, 5, 3)
    expected = np.exp(-0.035 * _numpy_radius(6, 5) ** 2)[..., None].repeat(3, -1)
    np.testing.assert_allclose(op.transfer(fve).detach().numpy(), expected, rtol=1e-6)
    # and the learned part still moves it: a gradient reaches the projection
    op.transfer(fve).sum().backward()
    assert op.to_k[0].weight.grad.abs().sum() > 0
    # the authors' form when k_init is not given: ReLU(Linear(FVE)) = 0, a pass-through
    plain = HeatMixer(dim=3, fve_size=6).op
    _zero_projection(plain)
    assert torch.equal(plain.transfer(fve), torch.ones(6, 5, 3))


def test_heat_with_k_fixed_at_zero_is_a_pass_through() -> None:
    torch.manual_seed(0)
    op = HeatMixer(dim=4, fve_size=5, k_mode="fixed", k_init=0.0).op.eval()
    fve = torch.randn(7, 9, 4)
    assert torch.equal(op.transfer(fve), torch.ones(7, 9, 4))
    x = torch.randn(2, 7, 9, 4)
    # filtering with all-ones factors is DCT then inverse DCT: the identity up to rounding
    torch.testing.assert_close(spectral_filter(x, op.transfer(fve)), x, rtol=1e-5, atol=1e-5)
    assert not torch.equal(op.transfer(fve), HeatMixer(dim=4, fve_size=5, k_mode="fixed").op.transfer(fve))


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_heat_k_init_refusals(bad: object) -> None:
    with pytest.raises(ValueError, match="k_init"):
        HeatMixer(dim=2, fve_size=2, k_mode="fixed", k_init=bad)


def test_heat_learnable_k_cannot_start_at_zero() -> None:
    with pytest.raises(ValueError, match="positive"):
        HeatMixer(dim=2, fve_size=2, k_mode="learnable", k_init=0.0)


def test_wave_time_init_is_the_wave_phase_through_the_frequency() -> None:
    tau = 0.7
    op = WaveMixer(dim=2, fve_size=4, time_init=tau).op
    _zero_projection(op)
    fve = torch.randn(8, 6, 2)
    c, alpha = op.c.item(), op.alpha.item()
    phase = c * tau * _numpy_radius(8, 6)
    expected = (np.cos(phase) + (1 + alpha / 2) * np.sin(phase) / (c + 1e-8))[..., None].repeat(2, -1)
    np.testing.assert_allclose(op.transfer(fve).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    # not a pass-through: the highest frequency changes sign (half a period at tau |w| = pi)
    assert expected[-1, -1, 0] < 0 < expected[0, 0, 0]
    plain = WaveMixer(dim=2, fve_size=4).op
    _zero_projection(plain)
    assert torch.allclose(plain.transfer(fve), torch.ones(8, 6, 2))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), None])
def test_wave_time_init_refusals(bad: object) -> None:
    with pytest.raises(ValueError, match="time_init"):
        WaveMixer(dim=2, fve_size=2, time_init=bad)


def test_initialisations_survive_timm_metaformer_init_and_fx() -> None:
    """The offsets are constants, not initial weights: MetaFormer's own init (std 0.02, zero bias) keeps them."""
    torch.manual_seed(0)
    heat = timm.create_model("pdeformer_micro", num_classes=2, mixer="heat", k_init=0.035)
    wave = timm.create_model("pdeformer_micro", num_classes=2, mixer="wave", time_init=0.7)
    x = torch.randn(2, 3, 32, 32)
    gain = {}
    for name, model in (("heat", heat), ("wave", wave)):
        mixer = model.stages[0].blocks[0].token_mixer
        t = mixer.op.transfer(mixer_fve(mixer.freq_embed, torch.zeros(1, 1, 8, 8)))
        gain[name] = t[-1, -1].mean().item()
        traced = torch.fx.symbolic_trace(model.eval())
        torch.testing.assert_close(traced(x), model(x))
    assert 0.4 < gain["heat"] < 0.7 and gain["wave"] < -0.3  # damped to about half; the sign turned


def test_hcl_mixer_takes_hcnets_k_modes() -> None:
    torch.manual_seed(0)
    fixed = HcLMixer(dim=4, hcl_k_mode="fixed", hcl_k_init=0.25)
    assert fixed.mixer.heat.k_mode == "fixed" and fixed.mixer.heat.k_init == 0.25
    learnable = HcLMixer(dim=4, hcl_k_mode="learnable", hcl_k_init=0.3)
    out = learnable(torch.randn(2, 4, 6, 6))
    out.sum().backward()
    assert learnable.mixer.heat.k_logit.grad is not None and learnable.mixer.heat.k_logit.grad != 0
    with pytest.raises(ValueError, match="k_mode"):
        HcLMixer(dim=4, hcl_k_mode="wrong")


@pytest.mark.parametrize(
    "args",
    [
        {"mixer": "heat", "k_init": "x"},
        {"mixer": "heat", "k_mode": "learnable", "k_init": 0},
        {"mixer": "wave", "time_init": -1},
        {"mixer": "hcl", "hcl_k_mode": "nope"},
        {"mixer": "attention", "k_init": 0.1},  # an option of another mixer
    ],
    ids=lambda a: "-".join(map(str, a.values())),
)
def test_bad_mixer_options_are_one_model_argument_error(args: dict) -> None:
    """What every task and command builds through: one line naming the argument, exit 2 at the CLI."""
    with pytest.raises(ModelArgumentError) as info:
        create_model("pdeformer_micro", num_classes=2, **args)
    assert "\n" not in str(info.value) and next(iter(set(args) - {"mixer"})) in str(info.value)


# -- the local controls of the flat family: ConvFormer's separable form around a spatial operation -----------------
def test_local_controls_are_timms_sepconv_with_their_spatial_operation() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 6, 9, 8)
    dw = DepthwiseMixer(dim=6)
    ref = SepConv(6, kernel_size=3, padding=1)
    ref.load_state_dict(dw.state_dict())
    torch.testing.assert_close(dw(x), ref(x))
    pool, point = AvgPoolMixer(dim=6), PointwiseMixer(dim=6)
    pool.load_state_dict(point.state_dict())
    hidden = point.act1(point.pwconv1(x))
    torch.testing.assert_close(point(x), point.pwconv2(hidden))
    torch.testing.assert_close(
        pool(x), point.pwconv2(torch.nn.functional.avg_pool2d(hidden, 3, 1, 1, count_include_pad=False) - hidden)
    )
    # the pointwise control mixes no tokens: a change at one token moves that token only
    y = x.clone()
    y[:, :, 4, 4] += 1.0
    moved = (point(y) - point(x)).abs().sum(1) > 0
    assert moved.sum() == 2 and moved[:, 4, 4].all()
    assert sum(p.numel() for p in DepthwiseMixer(dim=6, sep_expansion=3).parameters()) == 2 * 6 * 18 + 18 * 9 + 2
    with pytest.raises(ValueError, match="sep_expansion"):
        PointwiseMixer(dim=4, sep_expansion=0)


def test_hcl_hidden_widens_the_heat_step_between_projections() -> None:
    mixer = HcLMixer(dim=4, hcl_hidden=6)
    assert mixer.mixer.proj_in.weight.shape == (6, 4) and mixer.mixer.heat.dim == 6
    assert mixer(torch.randn(2, 4, 5, 5)).shape == (2, 4, 5, 5)
    with pytest.raises(ValueError, match="hcl_hidden"):
        HcLMixer(dim=4, hcl_hidden=0)
