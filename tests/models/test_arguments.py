"""Model arguments (issue 37): checked for sign, type and length by name before anything is built, iteration
counts bounded, a refused option named alone; and fuzzed: for every registered model and mixer, generated
arguments give a ``ValueError`` of one line (the command line's exit 2) or a model that runs."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from pdevision.models import list_models, list_restoration_models
from pdevision.models.factory import MAX_STEP_ARGUMENT, ModelArgumentError, create_model, min_input_size
from pdevision.models.pdeformer import MIXERS
from pdevision.models.restoration import create_restoration_model


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [  # the cases, each named by the argument that is wrong
        ("pdeformer_micro", {"num_classes": -1}, "num_classes=-1"),
        ("vheat_micro", {"num_classes": -1}, "num_classes=-1"),
        ("pdeformer_micro", {"dims": [8, 8]}, "dims and depths need one entry per stage, got 2 and 4"),
        ("pderesnet_micro", {"depths": [1, 1], "dims": [8, 8, 8]}, "depths has 2 and dims has 3"),
        ("pdeformer_micro", {"depths": [1, -1, 1, 1]}, "depths=[1, -1, 1, 1]"),
        ("hcnet_micro", {"depths": [1, -1, 1, 1]}, "depths=[1, -1, 1, 1]"),
        ("pdeformer_micro", {"in_chans": 0}, "in_chans=0"),
        ("vheat_micro", {"in_chans": 0}, "in_chans=0"),
        ("pdeformer_micro", {"dims": 0}, "dims=0"),
        ("waveformer_micro", {"dims": [0, 8, 8, 8]}, "dims=[0, 8, 8, 8]"),
        (
            "pdeformer_micro",
            {"mixer": "hcl", "hcl_steps": 16384},
            f"hcl_steps=16384 given must be an integer from 1 to {MAX_STEP_ARGUMENT}",
        ),
        ("pdeformer_micro", {"mixer": "hcl", "hcl_steps": 0}, "hcl_steps=0"),
        ("hcnet_micro", {"steps": 100}, "steps=100"),
    ],
)
def test_a_bad_model_argument_is_named_before_anything_is_built(name: str, args: dict, expected: str) -> None:
    with pytest.raises(ValueError) as info:  # ModelArgumentError is one; the command line's exit 2
        create_model(name, **args)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_an_option_of_another_mixer_names_only_what_the_model_does_not_take() -> None:
    """The message listed ['hcl_steps', 'mixer', 'num_classes'], two of which the model takes."""
    with pytest.raises(ModelArgumentError) as info:
        create_model("pdeformer_micro", num_classes=3, mixer="heat", hcl_steps=2)
    message = str(info.value)
    assert "pdeformer_micro with mixer='heat' does not take the arguments ['hcl_steps']" in message
    assert "'num_classes'" not in message.split("(")[0] and "'mixer'" not in message.split("(")[0]
    assert create_model("pdeformer_micro", num_classes=3, mixer="hcl", hcl_steps=2) is not None


def test_the_largest_iteration_count_still_builds_and_runs() -> None:
    model = create_model("pdeformer_micro", num_classes=2, mixer="hcl", hcl_steps=MAX_STEP_ARGUMENT).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 32, 32)).shape == (1, 2)


# -- the fuzz --------------------------------------------------------------------------------------------------

# values at and beyond the limits, of every JSON type, beside small valid ones
_INTS = st.sampled_from([-(2**31), -1, 0, 1, 2, 3, 4, 8, 16, 65, 16385, 2**63])
_SCALARS = st.one_of(
    _INTS,
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.0, 0.1, 0.5, 1.0, 1e300]),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(list(MIXERS)),
)
_VALUES = st.one_of(_SCALARS, st.lists(st.one_of(_INTS, st.booleans(), st.text(max_size=3)), max_size=6))
_KEYS = st.sampled_from(
    [
        "depths",
        "dims",
        "embed_dim",
        "in_chans",
        "num_classes",
        "mixer",
        "hcl_steps",
        "steps",
        "mlp_ratio",
        "drop_rate",
        "drop_path_rate",
        "layer_scale",
        "num_heads",
        "head_dim",
        "k_mode",
        "fve_size",
        "stem",
        "post_norm",
        "global_pool",
        "window_size",
        "bogus",
    ]
)
_ARGS = st.dictionaries(_KEYS, _VALUES, max_size=4)
# small widths: a generated argument set that the checks let through is run, so it must be cheap
_SMALL = st.dictionaries(
    st.sampled_from(["depths", "dims", "in_chans", "num_classes", "hcl_steps", "mixer", "mlp_ratio"]),
    st.one_of(
        st.sampled_from([-1, 0, 1, 2, 3, 8]),
        st.lists(st.sampled_from([-1, 0, 1, 2, 8]), max_size=5),
        st.sampled_from(list(MIXERS)),
    ),
    max_size=4,
)


def _micro(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith("_micro")]


def _outcome(build: Any, args: dict[str, Any], side: int = 32) -> None:
    """The model ``build()`` makes runs on a small input with finite outputs; or it raised a one-line
    ``ValueError`` (exit 2 on the command line). Anything else fails the test."""
    try:
        model = build()
    except ValueError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 600, (args, message)
        return
    chans = args.get("in_chans", 3)
    side = max(side, min_input_size(model))
    with torch.no_grad():
        out = model.eval()(torch.randn(1, chans, side, side))
    tensors = out if isinstance(out, (list, tuple)) else [out]
    assert all(bool(torch.isfinite(t).all()) for t in tensors), args


def _fuzz_models(names: list[str], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(names), label="model")
    args = data.draw(st.one_of(_ARGS, _SMALL), label="args")
    if (isinstance(args.get("dims"), int) and args["dims"] > 16) or any(
        isinstance(v, list) and any(isinstance(x, int) and not isinstance(x, bool) and x > 16 for x in v)
        for k, v in args.items()
        if k == "dims"
    ):
        args["dims"] = 8  # a valid large width runs too slowly for a fuzz case; the size bound is tested apart
    _outcome(lambda: create_model(name, **args), args)


def _fuzz_restoration(names: list[str], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(names), label="model")
    args = data.draw(st.one_of(_ARGS, _SMALL), label="args")
    args.pop("in_chans", None)
    args.pop("dims", None)
    if isinstance(args.get("embed_dim"), int) and not isinstance(args["embed_dim"], bool) and args["embed_dim"] > 16:
        args["embed_dim"] = 8
    _outcome(lambda: create_restoration_model(name, 3, 16, args), {**args, "in_chans": 3}, side=16)


FAST = settings(max_examples=25, deadline=5000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
LONG = settings(max_examples=1500, deadline=120000, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(data=st.data())
def test_fuzzed_model_arguments_give_one_line_or_a_model_that_runs(data: st.DataObject) -> None:
    _fuzz_models(_micro(list_models()), data)


@FAST
@given(data=st.data())
def test_fuzzed_restoration_arguments_give_one_line_or_a_model_that_runs(data: st.DataObject) -> None:
    _fuzz_restoration(_micro(list_restoration_models()), data)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_fuzzed_model_arguments_long_run_every_model(data: st.DataObject) -> None:
    _fuzz_models(list_models(), data)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_fuzzed_restoration_arguments_long_run_every_model(data: st.DataObject) -> None:
    _fuzz_restoration(list_restoration_models(), data)


@pytest.mark.parametrize("pool", [-1, "0", "", "token"])
def test_a_pooling_type_the_head_cannot_take_is_one_model_argument_error(pool: object) -> None:
    """Found by the long fuzz run: ``global_pool=-1`` reached timm as an AttributeError, ``"0"`` as an
    AssertionError, ``""`` built a model whose head failed at the first batch."""
    with pytest.raises(ModelArgumentError, match="global_pool"):
        create_model("vheat_micro", global_pool=pool)


@pytest.mark.parametrize(
    ("key", "value"), [("drop_path_rate", ""), ("drop_rate", 1.5), ("mlp_ratio", 1e300), ("num_classes", 2**63)]
)
def test_a_rate_or_ratio_out_of_range_names_itself(key: str, value: object) -> None:
    """Found by the long fuzz run: these reached torch as a TypeError, reported as an argument the model lacks."""
    with pytest.raises(ModelArgumentError, match=key):
        create_model("vheat_micro", **{key: value})
