"""The one way every staged family builds its backbone (``StagedBackbone``, docs/adding-a-family.md): the shared
arguments recorded by ``StagedBackbone.__init__``, then ``stem``, ``stages``, ``norm`` and ``head`` built once each,
in that order, by the family's own ``__init__``."""

from __future__ import annotations

from typing import Any

import pytest
import timm
import torch
from timm.layers import DropPath
from torch import nn

import pdevision  # noqa: F401  (registers the models)
from pdevision.models import StagedBackbone, list_models
from tests.helpers import STAGED_CASES

LAYOUTS = STAGED_CASES
PARTS = ("stem", "stages", "norm", "head")


def _ids(case: tuple[str, dict[str, Any]]) -> str:
    return "-".join([case[0], *map(str, case[1].values())])


def test_every_registered_family_but_metaformer_is_a_staged_backbone() -> None:
    staged = {name.split("_")[0].removesuffix("50") for name in list_models("*_micro")} - {"pdeformer"}
    assert staged == {"vheat", "waveformer", "hcnet", "pderesnet"}
    for name, kwargs in LAYOUTS:
        assert isinstance(timm.create_model(name, **kwargs), StagedBackbone)


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_stem_stages_norm_and_head_are_each_built_once_in_order(
    case: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def record(self: nn.Module, key: str, value: Any) -> None:
        if key in PARTS:
            built.append(key)
        nn.Module.__setattr__(self, key, value)

    monkeypatch.setattr(StagedBackbone, "__setattr__", record)
    model = timm.create_model(case[0], **case[1])
    assert built == list(PARTS)  # a stem built and then replaced would show twice
    assert isinstance(model.stages, nn.ModuleList) and len(model.stages) == len(model.depths)


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_the_shared_attributes_and_feature_info(case: tuple[str, dict[str, Any]]) -> None:
    model = timm.create_model(case[0], num_classes=5, dims=8, depths=(1, 2, 1), **case[1])
    assert model.dims == [8, 16, 32] and model.depths == [1, 2, 1]
    assert model.num_features == model.head_hidden_size == 32 and model.num_classes == 5
    assert model.min_input_size == 16 and model.in_chans == 3
    assert model.feature_info == [
        dict(num_chs=8, reduction=4, module="stages.0"),
        dict(num_chs=16, reduction=8, module="stages.1"),
        dict(num_chs=32, reduction=16, module="stages.2"),
    ]
    maps = model.forward_intermediates(torch.rand(1, 3, 48, 40), intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(1, 8, 12, 10), (1, 16, 6, 5), (1, 32, 3, 3)]


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_stochastic_depth_grows_linearly_over_the_blocks(case: tuple[str, dict[str, Any]]) -> None:
    model = timm.create_model(case[0], drop_path_rate=0.3, depths=(2, 1, 3, 2), **case[1])
    rates = []
    for stage in model.stages:
        for block in stage.blocks:
            drops = [m.drop_prob for m in block.modules() if isinstance(m, DropPath)]
            rates.append(drops[0] if drops else 0.0)
    assert rates == pytest.approx(torch.linspace(0, 0.3, 8).tolist())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(dims=(8, 16), depths=(1, 1, 1)), "one entry per stage, got 2 and 3"),
        (dict(depths=()), "depths must be a non-empty list"),
        (dict(in_chans=0), "in_chans must be a positive"),
        (dict(num_classes=-1), "num_classes must be 0"),
    ],
)
@pytest.mark.parametrize("name", ["vheat_micro", "hcnet_micro", "pderesnet_micro"])
def test_the_shared_arguments_are_checked_for_every_family(name: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        timm.create_model(name, **kwargs)


def test_a_pderesnet_stage_needs_a_block() -> None:
    with pytest.raises(ValueError, match=r"block counts >= 1"):
        timm.create_model("pderesnet_micro", depths=(1, 0, 1, 1))
    assert timm.create_model("vheat_micro", depths=(1, 0, 1, 1)).depths == [1, 0, 1, 1]
