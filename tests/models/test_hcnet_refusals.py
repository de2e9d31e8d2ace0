"""Issue 37's closing sweep, the authors' HcNet (``hcnet_*``): the retired ``layout`` argument, options of the
library's reconstructions (``hcnet_library_*``, ``hcnet_paper_*``) given to the authors' network, values of the
wrong type, ``checkpoint_filter_fn`` with garbage state dicts, and the same ``--model-args`` through ``train`` and
files of the authors' layout through ``eval``. Each is one line naming the argument (``ValueError`` /
``TypeError``, exit 2 on the command line) or a model that runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pdevision.models.factory import create_model
from pdevision.models.hcnet import HcNet, checkpoint_filter_fn
from tests.helpers import exit_code

MOVED = "the layouts 'library' and 'paper' are the models hcnet_library_* and hcnet_paper_*"
BAD_ARGUMENTS = {
    "layout-library": ({"layout": "library"}, MOVED),
    "layout-paper": ({"layout": "paper"}, MOVED),
    "layout-authors": ({"layout": "authors"}, "does not take the arguments ['layout']"),
    "layout-number": ({"layout": 5}, "does not take the arguments ['layout']"),
    "steps": ({"steps": 2}, f"HcNet got unexpected keyword argument(s): ['steps'] ({MOVED}"),
    "parametrisation": ({"parametrisation": "paper"}, "HcNet got unexpected keyword argument(s): ['parametrisation']"),
    "boundary": ({"boundary": "zeros"}, "HcNet got unexpected keyword argument(s): ['boundary']"),
    "post-norm": ({"post_norm": True}, "HcNet got unexpected keyword argument(s): ['post_norm']"),
    "layer-scale": ({"layer_scale": 1e-6}, "HcNet got unexpected keyword argument(s): ['layer_scale']"),
    "two-library-options": (
        {"steps": 2, "boundary": "zeros"},
        "HcNet got unexpected keyword argument(s): ['boundary', 'steps']",
    ),
    "steps-0": ({"steps": 0}, "steps=0 given must be an integer from 1 to 64"),
    "k-mode": ({"k_mode": "nope"}, "k_mode must be one of ('fixed', 'learnable', 'input')"),
    "k-init-nan": ({"k_init": float("nan")}, "k_init=nan given is not finite"),
    "k-init-negative": ({"k_init": -1.0}, "k_init must be in [0, 1]"),
    "k-init-2": ({"k_init": 2.0}, "k_init must be in [0, 1]"),
    "k-init-1-learnable": ({"k_mode": "learnable", "k_init": 1.0}, "in (0, 1) for k_mode='learnable'"),
    "mlp-ratio-0": ({"mlp_ratio": 0}, "mlp_ratio=0 given must be a number above 0"),
    "ra-filter-string": ({"ra_filter": "false"}, "ra_filter must be true or false, got 'false'"),  # kept the filter
    "ra-filter-number": ({"ra_filter": 0}, "ra_filter must be true or false, got 0"),
    "ra-filter-matched-string": ({"ra_filter_matched": "no"}, "ra_filter_matched must be true or false"),
    "dims-of-two-stages": ({"dims": [32, 64]}, "dims and depths need one entry per stage, got 2 and 4"),
    "depths-negative": ({"depths": [1, -1, 1, 1]}, "a block count >= 0"),
    "dims-zero": ({"dims": [32, 0, 64, 128]}, "a positive channel count"),
    "unknown-argument": ({"kmode": "input"}, "kmode"),
    "drop-path-1": ({"drop_path_rate": 1.0}, "drop_path_rate=1.0 given must be a number in [0, 1)"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_of_the_authors_layout_is_one_line_naming_it(case: str) -> None:
    args, message = BAD_ARGUMENTS[case]
    with pytest.raises((ValueError, TypeError)) as caught:
        create_model("hcnet_micro", num_classes=10, **args)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value


@pytest.mark.parametrize(
    "args",
    [{}, {"depths": [1, 1, 1]}, {"ra_filter": False}, {"k_mode": "fixed"}],
    ids=["defaults", "three-stages", "no-filter", "fixed-k"],
)
def test_arguments_at_the_edges_build_a_model_that_runs(args: dict) -> None:
    model = create_model("hcnet_micro", num_classes=10, **args).eval()
    assert type(model) is HcNet
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and bool(torch.isfinite(out).all())
    if "depths" in args:
        assert len(model.stages) == 3


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model("hcnet_micro", num_classes=10).eval()


def _authors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under the names of the authors' ``HcNet.py`` (the filter's inverse, for these keys)."""
    out = {}
    for key, value in model.state_dict().items():
        name = key.replace("stem.", "patch_embed.", 1).replace("head.fc.", "head.", 1)
        name = name.replace(".heat.k_proj.", ".fc_0.").replace("stages.", "layers.", 1)
        if ".downsample." in name:
            stage = int(name.split(".")[1]) - 1
            rest = name.split(".downsample.")[1].replace("conv.", "reduction.", 1)
            name = f"layers.{stage}.downsample.{rest}"
        out[name] = value
    return out


GARBAGE = {
    "empty": ({}, 0),
    "integer-keys": ({1: torch.zeros(1), "patch_embed.x": torch.zeros(1)}, 1),  # an AttributeError before
    "non-tensor-values": ({"layers.0.blocks.0.x": 3, "patch_embed.0.weight": "a", "layers.0.y": [1]}, 0),
    "none-values": ({"patch_embed.x": None}, 0),
    "nested-twice": ({"model": {"model": {"patch_embed.x": torch.zeros(1)}}}, 0),
    "bad-stage-number": ({"layers.x.downsample.reduction.weight": torch.zeros(1)}, 1),
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_the_filter_keeps_only_named_tensors_of_a_garbage_state_dict(case: str, model: torch.nn.Module) -> None:
    state, kept = GARBAGE[case]
    converted = checkpoint_filter_fn(state, model)
    assert len(converted) == kept and all(isinstance(k, str) for k in converted)
    assert all(isinstance(v, torch.Tensor) for v in converted.values())


@pytest.mark.parametrize("state", [[1, 2], None, torch.zeros(3), "weights.pth"], ids=["list", "none", "tensor", "str"])
def test_the_filter_of_something_not_a_dict_is_a_type_error_naming_it(state: object, model: torch.nn.Module) -> None:
    """Each was an ``AttributeError`` (``'list' object has no attribute 'get'``)."""
    with pytest.raises(TypeError, match=f"takes a state dict \\(names to tensors\\), not a {type(state).__name__}"):
        checkpoint_filter_fn(state, model)  # type: ignore[arg-type]


@pytest.mark.parametrize("wrap", ["plain", "model", "model_ema", "module-on-some", "module-on-all"])
def test_the_authors_names_in_every_wrapping_load_exactly(wrap: str, model: torch.nn.Module) -> None:
    authors = _authors(model)
    if wrap.startswith("module"):
        state = {
            ("module." + k if wrap == "module-on-all" or i % 2 else k): v for i, (k, v) in enumerate(authors.items())
        }
    else:
        state = authors if wrap == "plain" else {wrap: authors, "epoch": 3}
    fresh = create_model("hcnet_micro", num_classes=10)
    fresh.load_state_dict(checkpoint_filter_fn(state, fresh))
    for key, value in model.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[key], value, rtol=0, atol=0)


TRAIN = ["train", "--model", "hcnet_micro", "--img-size", "32", "--epochs", "1", "--max-train-batches", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"layout": "library"}, MOVED),
        ({"layout": 5}, "does not take the arguments ['layout']"),
        ({"steps": 2}, "HcNet got unexpected keyword argument(s): ['steps']"),
        ({"post_norm": True}, "HcNet got unexpected keyword argument(s): ['post_norm']"),
        ({"layer_scale": 0.1}, "HcNet got unexpected keyword argument(s): ['layer_scale']"),
        ({"k_mode": "nope"}, "k_mode must be one of"),
        ({"k_init": 1e308}, "k_init must be in [0, 1]"),
        ({"steps": 65}, "steps=65 given must be an integer from 1 to 64"),
        ({"dims": [32, 64, 128]}, "dims and depths need one entry per stage, got 3 and 4"),
        ({"ra_filter": "false"}, "ra_filter must be true or false"),
        ({"ra_filter_matched": 3}, "ra_filter_matched must be true or false"),
        ({"num_classes": 3}, "num_classes"),
    ],
)
def test_model_args_of_the_authors_layout_through_train_are_one_line(
    args: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert exit_code([*TRAIN, "--model-args", json.dumps(args), "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {**s, "patch_embed.conv1.weight": torch.zeros(1, 1)}, "none of the registered models"),
        (lambda s: {k: v for k, v in s.items() if not k.startswith("head.")}, None),  # an encoder: k-NN
        (lambda s: {**s, "layers.9.blocks.0.fc_0.weight": torch.zeros(1)}, "none of the registered models"),
        (lambda s: {"model": {k: v.numpy().tolist() for k, v in list(s.items())[:3]}}, "holds no tensors"),
    ],
    ids=["wrong-shape", "missing-head", "stage-past-the-last", "lists-not-tensors"],
)
@pytest.mark.slow  # the search of the layout among every registered model: seconds each
def test_a_crafted_file_of_the_authors_layout_through_eval_is_one_line(
    change, message: str | None, model: torch.nn.Module, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file without a head is an encoder, evaluated by k-NN: it was "no checkpoint at FILE (expected a folder with
    model.safetensors)", the encoder's evaluation reading only pdevision's folders."""
    path = tmp_path / "HcNet.pth"
    torch.save(change(_authors(model)), path)
    code = exit_code(["eval", "--checkpoint", str(path), "--output", str(tmp_path / "eval")])
    if message is None:
        assert code == 0 and "hcnet_micro encoder" in capsys.readouterr().out
        return
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
