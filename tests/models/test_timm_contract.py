"""timm's model contract for every model this library registers in timm's registry: the properties timm's own
``tests/test_models.py`` checks (``benchmarks/timm_contract`` runs that file itself), here at tiny widths and
depths. Each model keeps its registered class, equation, layout and default config; only ``dims`` and ``depths``
shrink. The ``*_micro`` models run by default, the other configurations are marked slow."""

from __future__ import annotations

import math

import pytest
import timm
import torch
from timm.layers import get_channel_dim, get_spatial_dim
from timm.models import get_notrace_functions, get_notrace_modules
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

import pdevision  # noqa: F401  (registers the models)
from pdevision.models import list_models

OURS = sorted(n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith("pdevision."))
TINY = dict(dims=8, depths=(1, 1, 1, 1))
FLAT_TINY = dict(dims=8, depths=(2,))  # the flat family keeps its one stage
MODELS = [pytest.param(n, marks=() if n.endswith("_micro") else pytest.mark.slow) for n in OURS]
MICROS = [n for n in OURS if n.endswith("_micro")]


def create(name: str, **kwargs: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, **{**(FLAT_TINY if "_flat_" in name else TINY), **kwargs})


def fx_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model traced by torch.fx with timm's leaf modules and functions, returning its last node, as timm's tests
    trace it (train and eval graphs)."""
    kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
    train_nodes, eval_nodes = get_graph_node_names(model, tracer_kwargs=kwargs)
    return create_feature_extractor(
        model, train_return_nodes=[train_nodes[-1]], eval_return_nodes=[eval_nodes[-1]], tracer_kwargs=kwargs
    )


def test_the_registered_models_are_the_families() -> None:
    """Only backbones / classifiers are in timm's registry (the restoration nets have their own)."""
    assert OURS == sorted(list_models())
    families = {"vheat", "waveformer", "hcnet", "pderesnet", "pdeformer"}
    assert {n.split("_")[0].rstrip("0123456789") for n in OURS} == families


@pytest.mark.parametrize("name", MODELS)
def test_default_cfg_head_and_classifier_reset(name: str) -> None:
    model = create(name).eval()
    cfg = model.pretrained_cfg
    state = model.state_dict()
    assert model.num_classes == cfg["num_classes"] > 0 and model.num_features > 0 and model.head_hidden_size > 0
    assert f"{cfg['classifier']}.weight" in state and f"{cfg['first_conv']}.weight" in state
    assert len(cfg["input_size"]) == 3 and len(cfg["mean"]) == len(cfg["std"]) == cfg["input_size"][0]
    assert 0 < cfg["crop_pct"] <= 1 and cfg["interpolation"] in ("bilinear", "bicubic")
    fmt = getattr(model, "output_fmt", "NCHW")  # as timm's tests read it (its MetaFormer has no attribute)
    spatial, channel = get_spatial_dim(fmt), get_channel_dim(fmt)
    x = torch.randn(1, *cfg["input_size"])
    with torch.no_grad():
        feats = model.forward_features(x)
        pre = model.forward_head(feats, pre_logits=True)
        logits = model(x)
        assert (feats.shape[spatial[0]], feats.shape[spatial[1]]) == tuple(cfg["pool_size"])
        assert feats.shape[channel] == model.num_features and pre.shape == (1, model.head_hidden_size)
        assert logits.shape == (1, cfg["num_classes"])
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pre, rtol=0, atol=0)
        model.reset_classifier(0, "")
        unpooled = model(x)
        assert unpooled.ndim == 4 and (unpooled.shape[spatial[0]], unpooled.shape[spatial[1]]) == cfg["pool_size"]
        model.reset_classifier(7, "avg")
        assert model(x).shape == (1, 7) and model.get_classifier().out_features == 7
        bare = create(name, num_classes=0, global_pool="").eval()
        assert bare(x).ndim == 4


@pytest.mark.parametrize("name", MODELS)
def test_features_only_intermediates_and_grad_checkpointing(name: str) -> None:
    size = (1, 3, 96, 80)  # not square, not a multiple of 32
    x = torch.randn(size)
    model = create(name).eval()
    with torch.no_grad():
        out = model(x)
        final, inter = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x), rtol=0, atol=0)
        model.set_grad_checkpointing()
        torch.testing.assert_close(model(x), out, rtol=1e-4, atol=1e-5)
    info = timm.models.FeatureInfo(model.feature_info, len(model.feature_info))
    assert len(info.channels()) >= (1 if "_flat_" in name else 3) and len(inter) == len(info.channels())
    for feature_cls in ("getter", None):
        fmodel = create(name, features_only=True, **({"feature_cls": feature_cls} if feature_cls else {})).eval()
        with torch.no_grad():
            feats = fmodel(x)
        assert fmodel.feature_info.channels() == info.channels()
        for maps in (inter, feats):
            assert len(maps) == len(info.channels())
            for m, c, r in zip(maps, info.channels(), info.reduction(), strict=True):
                assert m.shape[:2] == (1, c), (feature_cls, m.shape)  # NCHW
                assert m.shape[2] <= math.ceil(size[2] / r) + 1 and m.shape[3] <= math.ceil(size[3] / r) + 1
                assert torch.isfinite(m).all()


@pytest.mark.parametrize("name", MODELS)
def test_backward_reaches_every_parameter(name: str) -> None:
    model = create(name, num_classes=42).train()
    out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 42)
    out.mean().backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


@pytest.mark.parametrize("name", MICROS)
def test_fx_forward_equals_eager_bitwise(name: str) -> None:
    """As timm's test: the registered configuration at its default input size, eval mode, bit for bit."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = torch.randn(1, *model.pretrained_cfg["input_size"])
    with torch.inference_mode():
        want = model(x)
        got = next(iter(fx_model(model)(x).values()))
    assert torch.equal(got, want), (got - want).abs().max()


@pytest.mark.parametrize("name", MODELS)
def test_fx_forward_close_and_backward_reaches_every_parameter(name: str) -> None:
    model = create(name).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.inference_mode():
        torch.testing.assert_close(next(iter(fx_model(model)(x).values())), model(x), rtol=1e-5, atol=1e-5)
    traced = fx_model(create(name, num_classes=42).train())
    out = next(iter(traced(x).values()))
    assert out.shape == (2, 42)
    out.mean().backward()
    missing = [n for n, p in traced.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
