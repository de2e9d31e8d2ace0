"""The bound on a model's size from its arguments: parameters counted on the meta device before anything is built."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from pdevision.models import list_models, list_restoration_models
from pdevision.models.factory import MAX_PARAMETERS, UnsafeModelArgumentError, check_model_size, create_model
from pdevision.models.restoration import create_restoration_model


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(set(list_models("*_micro")) | {"pderesnet_micro"}))
def test_every_family_builds_on_the_meta_device_with_the_real_parameter_count(name: str) -> None:
    """The bound is silent for a model that does not build on the meta device (a ``.tolist()`` of a meta tensor did
    that to every family but PDEFormer), so each family must build there, with the parameters of the real build."""
    with torch.device("meta"):
        meta = timm.create_model(name, num_classes=10)
    assert _count(meta) == _count(timm.create_model(name, num_classes=10)) > 0


@pytest.mark.parametrize("name", list_restoration_models("*_micro"))
def test_every_restoration_model_builds_on_the_meta_device(name: str) -> None:
    with torch.device("meta"):
        meta = create_restoration_model(name, 3)
    assert _count(meta) == _count(create_restoration_model(name, 3)) > 0


def test_the_bound_counts_what_the_arguments_ask_for_together() -> None:
    # each width is within its own bound (16384); the model they make is 480 billion parameters
    with pytest.raises(UnsafeModelArgumentError, match=r"vheat_micro with dims=16384 would have 479\.6 billion"):
        create_model("vheat_micro", num_classes=10, img_size=64, dims=16384)
    with pytest.raises(
        UnsafeModelArgumentError, match=r"vheatir_micro with embed_dim=16384, img_size=32 would have 15\.9"
    ):
        create_restoration_model("vheatir_micro", 3, 32, {"embed_dim": 16384})


def test_the_bound_counts_what_a_large_input_asks_for() -> None:
    """vHeat's frequency embeddings grow with the square of the input: at 16384 px vheat_micro has 1.0 billion
    parameters and vHeatIR 17 billion, with no model argument at all (a size a checkpoint's metadata may hold)."""
    with pytest.raises(UnsafeModelArgumentError, match=r"vheat_micro with img_size=16384 would have 1\.0 billion"):
        create_model("vheat_micro", num_classes=10, img_size=16384)
    with pytest.raises(UnsafeModelArgumentError, match=r"vheatir_micro with img_size=16384 would have 17\.2 billion"):
        create_restoration_model("vheatir_micro", 3, 16384, {})
    assert _count(create_model("vheat_micro", num_classes=10, img_size=64)) < MAX_PARAMETERS
    assert _count(create_model("vheat_micro", num_classes=10, img_size=64, dims=8)) < MAX_PARAMETERS


def test_a_build_that_fails_on_the_meta_device_is_left_to_the_real_build() -> None:
    def fails() -> nn.Module:
        raise TypeError("an argument the model does not take")

    assert check_model_size(fails, "m", {}) is None  # the real build reports the TypeError, as before
    check_model_size(lambda: nn.Linear(10, 10), "small", {})  # no error below the bound
