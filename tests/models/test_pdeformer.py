"""pdeformer_micro: timm's MetaFormer with a token mixer chosen by name, trained and reloaded by pdevision."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models.metaformer import GroupNorm1NoBias, MetaFormer

from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
from pdevision.engine.modeling import load_into_model, model_from_meta
from pdevision.layers import ConvStem
from pdevision.models.pdeformer import MIXERS, PDE_MIXERS, PDEFormer
from pdevision.tasks.classify import ClassifyConfig, train
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
