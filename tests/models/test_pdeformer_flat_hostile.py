"""Issue 61's closing sweep, the flat skeleton's arguments (``pdeformer_flat_micro`` / ``_small``): depths, widths,
patch sizes, mixers, stems, drop-path rates, image sizes and seeds that are zero, negative, huge, of the wrong type or
do not fit the image. In Python (``pdevision.models.factory.create_model`` and, for the arguments the model itself
checks, ``timm.create_model``) each is a ``ValueError`` (a ``ModelArgumentError`` from ``create_model``) naming the
argument; on the command line (``train --model pdeformer_flat_micro --model-args ...``) one line, exit 2, before
anything is written. The controls build and run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch

from pdevision.models.factory import ModelArgumentError, create_model
from tests.helpers import exit_code

# model arguments -> what the one line names (through create_model and the command line)
BAD = {
    "depths-negative": ({"depths": [-1]}, "depths=[-1]"),
    "depths-huge": ({"depths": [100_000]}, "depths=100000"),
    "depths-an-int": ({"depths": 6}, "depths must be a list of block counts"),
    "depths-a-string": ({"depths": "6"}, "depths='6'"),
    "depths-a-float": ({"depths": [2.5]}, "depths=[2.5]"),
    "depths-a-bool": ({"depths": [True]}, "depths=[True]"),
    "depths-empty": ({"depths": []}, "depths=[]"),
    "depths-two-stages": ({"depths": [3, 3]}, "dims and depths need one entry per stage"),
    "depths-nested": ({"depths": [[6]]}, "depths=[[6]]"),
    "dims-zero": ({"dims": [0]}, "dims=[0]"),
    "dims-negative": ({"dims": [-64]}, "dims=[-64]"),
    "dims-a-billion-parameters": ({"dims": [16384]}, "would have 19.3 billion parameters"),
    "dims-over-the-size-limit": ({"dims": [1_000_000]}, "dims=1000000"),
    "dims-a-float": ({"dims": [64.0]}, "dims=[64.0]"),
    "dims-a-string": ({"dims": "64"}, "dims='64'"),
    "dims-two-stages": ({"dims": [64, 128]}, "dims and depths need one entry per stage"),
    "patch-zero": ({"patch_size": 0}, "patch_size must be an integer from 1 to 64"),
    "patch-negative": ({"patch_size": -2}, "patch_size must be an integer from 1 to 64"),
    "patch-over-64": ({"patch_size": 65}, "patch_size must be an integer from 1 to 64"),
    "patch-a-float": ({"patch_size": 2.5}, "patch_size must be an integer from 1 to 64"),
    "patch-a-string": ({"patch_size": "2"}, "patch_size must be an integer from 1 to 64"),
    "patch-a-bool": ({"patch_size": True}, "patch_size must be an integer from 1 to 64"),
    "mixer-unknown": ({"mixer": "fourier"}, "mixer must be one of"),
    "mixer-empty": ({"mixer": ""}, "mixer must be one of"),
    "mixer-upper-case": ({"mixer": "HEAT"}, "mixer must be one of"),
    "mixer-an-arm-name": ({"mixer": "heat_pass"}, "mixer must be one of"),
    "mixer-a-number": ({"mixer": 3}, "mixer must be one of"),
    "stem-unknown": ({"stem": "vit"}, "stem must be one of"),
    "drop-path-negative": ({"drop_path_rate": -0.1}, "drop_path_rate=-0.1 given must be a number in [0, 1)"),
    "drop-path-one": ({"drop_path_rate": 1.0}, "drop_path_rate=1.0 given must be a number in [0, 1)"),
    "drop-path-above-one": ({"drop_path_rate": 2}, "drop_path_rate=2 given must be a number in [0, 1)"),
    "drop-path-a-string": ({"drop_path_rate": "0.1"}, "drop_path_rate='0.1' given must be a number in [0, 1)"),
    "fve-zero": ({"fve_size": 0}, "fve_size must be an integer from 1 to 256"),
    "fve-huge": ({"fve_size": 100_000}, "fve_size=100000"),
    "in-chans-zero": ({"in_chans": 0}, "in_chans=0"),
    "in-chans-a-string": ({"in_chans": "3"}, "in_chans='3'"),
    "init-seed-negative": ({"init_seed": -1}, "init_seed must be None or an integer >= 0"),
    "mlp-ratio-zero": ({"mlp_ratio": 0}, "mlp_ratio=0"),
    "attention-head-dim-not-dividing": ({"mixer": "attention", "head_dim": 7}, "multiples of head_dim=7"),
    "hcl-hidden-zero": ({"mixer": "hcl", "hcl_hidden": 0}, "hcl_hidden must be a positive integer"),
    "hcl-steps-huge": ({"mixer": "hcl", "hcl_steps": 1_000_000}, "hcl_steps=1000000"),
    "hyperbolic-expansion-zero": ({"mixer": "hyperbolic", "expansion": 0}, "expansion must be a positive integer"),
    "an-option-of-another-mixer": ({"mixer": "wave", "hcl_steps": 2}, "does not take the arguments ['hcl_steps']"),
    "unknown-argument": ({"foo": 1}, "does not take the arguments ['foo']"),
}


@pytest.mark.parametrize("variant", ["pdeformer_flat_micro", "pdeformer_flat_small"])
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_argument_is_a_model_argument_error_naming_it(case: str, variant: str) -> None:
    args, message = BAD[case]
    with pytest.raises(ModelArgumentError) as caught:
        create_model(variant, num_classes=10, img_size=32, **args)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value


# what the model checks itself, reached through timm's own create_model: a ValueError naming the argument (torch's
# "number of steps must be non-negative" or MetaFormer's len() of an int before)
TIMM_BAD = [
    "depths-an-int",
    "depths-two-stages",
    "patch-zero",
    "patch-a-float",
    "mixer-unknown",
    "mixer-a-number",
    "stem-unknown",
    "drop-path-negative",
    "drop-path-one",
    "drop-path-a-string",
    "fve-zero",
    "init-seed-negative",
    "attention-head-dim-not-dividing",
    "hcl-hidden-zero",
    "hyperbolic-expansion-zero",
]


@pytest.mark.parametrize("case", TIMM_BAD)
def test_timm_create_model_refuses_what_the_model_checks(case: str) -> None:
    args, message = BAD[case]
    with pytest.raises(ValueError) as caught:
        timm.create_model("pdeformer_flat_micro", **args)
    assert message.split("=")[0].split()[0] in str(caught.value), caught.value


@pytest.mark.parametrize(
    "img_size",
    [0, -32, 16385, 10**9, "32", 32.5, [32], [32, 32, 32], torch.tensor(32), True],
    ids=[
        "zero",
        "negative",
        "over-the-limit",
        "huge",
        "a-string",
        "a-float",
        "one-item",
        "three-items",
        "tensor",
        "bool",
    ],
)
def test_an_image_size_that_is_no_size_is_refused_by_name(img_size: object) -> None:
    """The flat models take no ``img_size`` (the patch grid follows the input), so ``create_model`` dropped it unread:
    0, -32, 10**9, 32.5 and a tensor built a model without a word, and "32" was a ``TypeError`` of a comparison."""
    with pytest.raises(ModelArgumentError, match=r"^img_size=.* must be an integer from 1 to 16384"):
        create_model("pdeformer_flat_micro", num_classes=10, img_size=img_size)


@pytest.mark.parametrize(
    ("args", "size", "tokens"),
    [({"patch_size": 3}, 32, 10), ({"patch_size": 5}, 48, 9), ({"depths": [0]}, 32, 16), ({"dims": 32}, 32, 16)],
    ids=["patch-3-at-32", "patch-5-at-48", "no-blocks", "width-as-one-int"],
)
def test_a_patch_size_that_does_not_divide_the_image_or_an_odd_skeleton_still_runs(
    args: dict, size: int, tokens: int
) -> None:
    """The controls: a patch size that does not divide the image drops the last partial patch (a strided
    convolution), no blocks is a linear probe of the patches; each gives finite logits."""
    model = create_model("pdeformer_flat_micro", num_classes=10, img_size=size, **args).eval()
    with torch.no_grad():
        features = model.forward_features(torch.randn(1, 3, size, size))
        logits = model.forward_head(features)
    assert features.shape[-2:] == (tokens, tokens) and logits.shape == (1, 10) and torch.isfinite(logits).all()


# -- the command line ---------------------------------------------------------------------------------------------

CLI = {
    **{case: BAD[case] for case in ("depths-negative", "depths-huge", "depths-an-int", "dims-zero", "dims-a-string")},
    **{case: BAD[case] for case in ("patch-zero", "patch-a-float", "mixer-unknown", "mixer-a-number")},
    **{case: BAD[case] for case in ("drop-path-one", "drop-path-negative", "fve-zero", "init-seed-negative")},
    **{case: BAD[case] for case in ("attention-head-dim-not-dividing", "unknown-argument", "depths-nested")},
    "patch-larger-than-the-image": ({"patch_size": 33}, "image size 32 is below the model's minimum of 33"),
    "patch-of-the-largest-size": ({"patch_size": 64}, "image size 32 is below the model's minimum of 64"),
    "img-size-in-model-args": ({"img_size": 0}, "img_size is set with --img-size"),
    "num-classes-in-model-args": ({"num_classes": 3}, "num_classes"),
    "pretrained-in-model-args": ({"pretrained": True}, "could make the library download"),
}


@pytest.mark.parametrize("case", list(CLI))
def test_a_bad_argument_on_the_command_line_is_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, message = CLI[case]
    run = tmp_path / "run"
    argv = ["train", "--model", "pdeformer_flat_micro", "--model-args", json.dumps(args), "--img-size", "32"]
    capsys.readouterr()
    assert exit_code([*argv, "--output", str(run), "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and message in err, err
    assert not run.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--img-size", "1"], "image size 1 is below the model's minimum of 2"),
        (["--img-size", "0"], "--img-size"),
        (["--drop-path", "1"], "--drop-path: must be a number in [0, 1)"),
        (["--model", "pdeformer_flat_large"], "unknown model 'pdeformer_flat_large'"),
    ],
    ids=["img-size-below-the-patch", "img-size-zero", "drop-path-one", "no-such-size"],
)
def test_a_flag_that_does_not_fit_the_skeleton_is_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    capsys.readouterr()
    model = [] if "--model" in flags else ["--model", "pdeformer_flat_micro"]
    argv = ["train", *model, *flags, "--output", str(run), "--epochs", "1"]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not run.exists()
