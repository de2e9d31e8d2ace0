"""pdeformer_micro: timm's MetaFormer with a token mixer chosen by name, trained and reloaded by pdevision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.models.metaformer import GroupNorm1NoBias, MetaFormer

from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
from pdevision.engine.modeling import load_into_model, model_from_meta
from pdevision.layers import ConvStem
from pdevision.models.pdeformer import FLAT_ARMS, MIXERS, PDE_MIXERS, PDEFormer
from pdevision.tasks.classify import ClassifyConfig, train
from pdevision.viz.erf import erf_maps
from tests.helpers import exit_code, make

TINY = dict(dims=8, depths=(1, 1, 1, 1), num_classes=5)


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_every_mixer_builds_the_same_skeleton(mixer: str) -> None:
    model = timm.create_model("pdeformer_micro", mixer=mixer, **TINY)
    assert type(model) is PDEFormer and isinstance(model, MetaFormer) and model.mixer == mixer
    assert isinstance(model.stages[2].blocks[0].token_mixer, MIXERS[mixer])
    assert model(torch.randn(1, 3, 33, 47)).shape == (1, 5)


def test_features_only_gives_the_four_stages_nchw() -> None:
    model = timm.create_model("pdeformer_micro", mixer="wave", features_only=True, **TINY)
    feats = model(torch.randn(1, 3, 64, 64))
    assert [f.shape[1:] for f in feats] == [(8, 16, 16), (16, 8, 8), (32, 4, 4), (64, 2, 2)]


def test_the_patch_stem_is_timms_metaformer_unchanged_and_the_conv_stem_only_replaces_the_stem() -> None:
    torch.manual_seed(0)
    ours = timm.create_model("pdeformer_micro", mixer="pooling", stem="patch", **TINY).eval()
    torch.manual_seed(0)
    theirs = MetaFormer(
        token_mixers=MIXERS["pooling"],
        norm_layers=GroupNorm1NoBias,  # PoolFormerV2's norm, as timm's poolformerv2_* build it
        **{**TINY, "dims": (8, 16, 32, 64)},
        use_mlp_head=False,
    ).eval()
    x = torch.randn(2, 3, 40, 40)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())
    assert torch.equal(ours(x), theirs(x))
    conv = timm.create_model("pdeformer_micro", mixer="pooling", **TINY)
    assert isinstance(conv.stem, ConvStem) and conv.stem_type == "conv" and ours.stem_type == "patch"
    assert conv.feature_info == ours.feature_info  # stride 4 to dims[0] either way
    assert conv.stem(x).shape == ours.stem(x).shape == (2, 8, 10, 10)
    assert {k for k in conv.state_dict() if not k.startswith("stem.")} == {
        k for k in ours.state_dict() if not k.startswith("stem.")
    }
    assert "stem.conv1.weight" in conv.state_dict()  # the default_cfg's first_conv
    assert conv.pretrained_cfg["first_conv"] == "stem.conv1"
    with pytest.raises(ValueError, match="stem must be one of"):
        timm.create_model("pdeformer_micro", stem="vit")


def test_unknown_mixer_and_foreign_mixer_options_are_refused() -> None:
    with pytest.raises(ValueError, match="mixer must be one of"):
        timm.create_model("pdeformer_micro", mixer="fourier")
    # an option only another mixer takes is refused by timm's MetaFormer itself
    with pytest.raises(TypeError, match="equation"):
        timm.create_model("pdeformer_micro", mixer="pooling", equation="eq4")
    with pytest.raises(ValueError, match="multiples of head_dim"):
        timm.create_model("pdeformer_micro", mixer="attention", dims=(32, 48, 64, 96))
    assert (
        timm.create_model("pdeformer_micro", mixer="hyperbolic", equation="eq4", **TINY)
        .stages[0]
        .blocks[0]
        .token_mixer.block.equation
        == "eq4"
    )


@pytest.mark.parametrize("mixer", [m if m == "wave" else pytest.param(m, marks=pytest.mark.slow) for m in PDE_MIXERS])
def test_trains_with_the_loop_and_reloads_from_its_checkpoint(tmp_path: Path, mixer: str) -> None:
    out = tmp_path / mixer
    args = {"mixer": mixer, "dims": 8, "depths": [1, 1, 1, 1]}
    summary = train(
        make(
            ClassifyConfig,
            model="pdeformer_micro",
            model_args=args,
            img_size=32,
            batch_size=32,
            epochs=1,
            max_train_batches=2,
            progress=False,
            output=str(out),
        )
    )
    assert summary["epochs_run"] == 1 and summary["model"] == "pdeformer_micro"
    ckpt = resolve_checkpoint(str(out))
    meta = read_meta(ckpt)
    assert meta["model_args"]["mixer"] == mixer
    model = model_from_meta(meta, len(meta["classes"]))
    load_into_model(model, ckpt, meta["model"], list(meta["classes"]))
    assert isinstance(model.stages[0].blocks[0].token_mixer, MIXERS[mixer])
    assert exit_code(["eval", "--checkpoint", str(out), "--batch-size", "64"]) == 0


def test_cli_refuses_an_unknown_mixer_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "pdeformer_micro", "--model-args", '{"mixer": "fourier"}', "--output", str(tmp_path)]
    assert exit_code([*argv, "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mixer must be one of" in err[0]
    argv[4] = '{"stem": "vit"}'
    assert exit_code([*argv, "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stem must be one of" in err[0]


# -- the flat family: one patch embedding, one resolution, the mixer the only difference ----------------------------
def _flat(arm: str, seed: int | None = 0, **kwargs) -> PDEFormer:
    mixer, options = FLAT_ARMS[arm]
    return timm.create_model("pdeformer_flat_micro", mixer=mixer, num_classes=2, init_seed=seed, **options, **kwargs)


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_flat_models_keep_one_16_by_16_token_grid_at_32_px() -> None:
    for name in ("pdeformer_flat_micro", "pdeformer_flat_small"):
        model = timm.create_model(name, num_classes=3)
        assert len(model.stages) == 1 and isinstance(model.stages[0].downsample, torch.nn.Identity)
        assert model.stem.conv.kernel_size == model.stem.conv.stride == (2, 2)
        assert model.forward_features(torch.randn(1, 3, 32, 32)).shape[-2:] == (16, 16)
        assert model.feature_info == [{"num_chs": model.num_features, "reduction": 2, "module": "stages.0"}]
        assert model(torch.randn(2, 3, 33, 47)).shape == (2, 3)  # any size
    assert set(FLAT_ARMS) >= {"heat", "heat_pass", "wave", "hcl", "hyperbolic", "attention"}
    assert {mixer for mixer, _ in FLAT_ARMS.values()} == set(MIXERS) - {"identity", "pooling", "sepconv"}


@pytest.mark.parametrize("name", ["pdeformer_flat_micro", "pdeformer_flat_small"])
def test_flat_arms_hold_the_parameters_within_5_percent_of_heat(name: str) -> None:
    """Every arm within 5% of heat's parameters; heat's pass-through is heat less exactly its diffusivity
    projection (C^2 + C a block), the weights that set the filter it does not have."""
    counts = {}
    for arm, (mixer, options) in FLAT_ARMS.items():
        counts[arm] = _count(timm.create_model(name, mixer=mixer, num_classes=2, **options))
    heat = counts["heat"]
    far = {arm: n / heat for arm, n in counts.items() if abs(n / heat - 1) > 0.05}
    assert set(far) == {"heat_pass"}, far
    model = timm.create_model(name)
    c, depth = model.num_features, len(model.stages[0].blocks)
    assert heat - counts["heat_pass"] == depth * (c * c + c)
    assert len(set(counts.values())) > 3  # the widths differ by arm: the check is not of one model


def test_arms_of_one_seed_share_every_weight_outside_the_mixer() -> None:
    torch.manual_seed(0)
    state = torch.get_rng_state()
    models = {arm: _flat(arm, seed=3) for arm in FLAT_ARMS}
    assert torch.equal(torch.get_rng_state(), state)  # building drew nothing: data order and augmentation unchanged
    outside = {arm: {k: v for k, v in m.state_dict().items() if ".token_mixer." not in k} for arm, m in models.items()}
    ref = outside["heat"]
    for arm, weights in outside.items():
        assert weights.keys() == ref.keys(), arm
        for key, value in weights.items():  # attention's token-layout MLP is a Linear, the others' a 1x1 conv
            assert torch.equal(value.flatten(), ref[key].flatten()), (arm, key)
    # the random parts really are random: another seed changes them, and the mixers differ between arms
    other = _flat("heat", seed=4).state_dict()
    assert not torch.equal(other["stem.conv.weight"], models["heat"].state_dict()["stem.conv.weight"])
    assert not torch.equal(other["stages.0.blocks.2.mlp.fc1.weight"], ref["stages.0.blocks.2.mlp.fc1.weight"])


def test_the_mixer_is_drawn_from_its_own_generator() -> None:
    """The mixer's weights are those of ``init_seed`` whatever torch's global generator holds; without
    ``init_seed`` the model is timm's, drawn from the global generator."""
    torch.manual_seed(1)
    a = _flat("dwconv", seed=5).state_dict()
    torch.manual_seed(2)
    b = _flat("dwconv", seed=5).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(1)
    c = _flat("dwconv", seed=None).state_dict()
    torch.manual_seed(1)
    d = _flat("dwconv", seed=None).state_dict()
    assert all(torch.equal(c[k], d[k]) for k in c)
    mixer = "stages.0.blocks.0.token_mixer.pwconv1.weight"
    assert not torch.equal(a[mixer], c[mixer])
    with pytest.raises(ValueError, match="init_seed must be None or an integer"):
        _flat("heat", seed=-1)


def _erf(arm: str) -> np.ndarray:
    """The ERF map of the centre token at initialisation, in float64 (where the DCT and its inverse cancel to about
    1e-16 of the signal)."""
    images = torch.rand(1, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return erf_maps(_flat(arm).double(), images)[0]


def _side(support: np.ndarray) -> tuple[int, int, int]:
    ys, xs = np.nonzero(support)
    return int(ys.max() - ys.min() + 1), int(xs.max() - xs.min() + 1), len(ys)


def test_flat_receptive_fields_are_the_layouts() -> None:
    """At initialisation: the pointwise arm sees its own 2 x 2 patch; a local arm one more token a block (6 blocks:
    13 tokens, 26 px, where its gradient is exactly zero beyond) and less than the image above 1e-12 of its
    largest gradient; heat's pass-through is local; heat and attention see every pixel."""
    maps = {arm: _erf(arm) for arm in ("pointwise", "dwconv", "heat_pass", "heat", "attention")}
    assert _side(maps["pointwise"] > 0) == (2, 2, 4)
    assert _side(maps["dwconv"] > 0) == (26, 26, 26 * 26)
    seen = {arm: _side(m > 1e-12 * m.max()) for arm, m in maps.items()}
    assert seen["dwconv"][0] < 32 and seen["heat_pass"][0] < 32
    assert seen["heat"][2] == seen["attention"][2] == 32 * 32
