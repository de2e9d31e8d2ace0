"""``drop_path_rate`` outside [0, 1) (or NaN) is refused by every family's constructor, naming the argument and
the range; it used to be accepted and fail at the first training step. The constructor is the model side's one check
(``models._arguments.check_rate``): model arguments from a file or the command line reach it too."""

from __future__ import annotations

import math
import re

import pytest
import timm
import torch

import pdevision  # noqa: F401  (registers the models)
from pdevision.models.restoration import create_restoration_model

FAMILIES = ["vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("rate", [2.0, 1.0, -0.1, math.nan, math.inf, "0.1", True])
def test_drop_path_rate_out_of_range_is_refused(name: str, rate: object) -> None:
    with pytest.raises(ValueError, match=r"drop_path_rate=.* given must be a number in \[0, 1\)"):
        timm.create_model(name, drop_path_rate=rate)


@pytest.mark.parametrize("name", FAMILIES)
def test_drop_path_rate_in_range_trains(name: str) -> None:
    model = timm.create_model(name, drop_path_rate=0.5, num_classes=3).train()
    loss = model(torch.randn(2, 3, 32, 32)).logsumexp(-1).mean()
    loss.backward()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", ["vheatir_micro", "swinir_micro", "dncnn_micro"])
def test_restoration_nets_refuse_a_drop_path_rate_they_do_not_have(name: str) -> None:
    with pytest.raises(ValueError, match="drop_path_rate"):
        create_restoration_model(name, 1, 32, {"drop_path_rate": 2.0})


@pytest.mark.parametrize("name", FAMILIES)
def test_model_arguments_reach_the_constructors_one_check(name: str) -> None:
    """The argument checker of files and ``--model-args`` has no rule of its own for drop rates (it had a regex on
    argument names): the constructor's check refuses the value, before any memory is allocated."""
    from pdevision.models._arguments import check_model_args
    from pdevision.models.factory import ModelArgumentError, create_model

    assert check_model_args({"drop_path_rate": 2.0}) == {"drop_path_rate": 2.0}  # not its check
    with pytest.raises(ModelArgumentError, match=r"drop_path_rate=2.0 given must be a number in \[0, 1\)"):
        create_model(name, drop_path_rate=2.0)


@pytest.mark.parametrize("text", ["0", "0.5", "0.999", "1", "2", "-0.1", "nan", "inf", "half"])
def test_the_flag_accepts_exactly_the_rates_the_model_accepts(text: str) -> None:
    """``--drop-path``'s type calls the model side's check: one bound, one message, for the flag and the argument."""
    import argparse

    from pdevision.engine.validators import drop_rate
    from pdevision.models.factory import RATE_EXPECTED, ModelArgumentError, check_rate

    try:
        expected = check_rate(float(text))
    except (ValueError, ModelArgumentError):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"must be {RATE_EXPECTED}, got {text!r}")):
            drop_rate(text)
    else:
        assert drop_rate(text) == expected == float(text)
