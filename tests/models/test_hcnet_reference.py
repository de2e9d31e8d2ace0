"""Parity with the HcNet authors' released ``HcNet.py``: parameter counts, MACs, initialisation, checkpoints and
logits (fixtures recorded from their code by tests/fixtures/make_hcnet_reference.py; see tests/fixtures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import pdevision  # noqa: F401
from pdevision.bench import count_macs, count_params
from pdevision.models.hcnet import checkpoint_filter_fn
from tests.helpers import FIXTURES, relative_error, seeded_input, seeded_state

PARAMS = json.loads((FIXTURES / "hcnet_ref_params.json").read_text())
MICRO = FIXTURES / "hcnet_ref_micro.pth"


def _config(name: str) -> dict:
    cfg = PARAMS["models"][name]["config"]
    return dict(dims=tuple(cfg["embed_dim"]), depths=tuple(cfg["depths"]), drop_path_rate=cfg["drop_path_rate"])


@pytest.mark.parametrize("name", list(PARAMS["models"]))
def test_registered_configurations_have_the_authors_counts(name: str) -> None:
    """Every registered configuration built with the authors' class: same arguments, parameters, MACs at 224."""
    with torch.device("meta"):  # shapes only: no memory, no initialisation time
        model = timm.create_model(name).eval()
        x = torch.zeros(1, 3, 224, 224)
        with FlopCounterMode(display=False) as counter:
            model(x)
    ref = PARAMS["models"][name]
    assert (model.dims, model.depths) == (ref["config"]["embed_dim"], ref["config"]["depths"])
    assert model.stages[-1].blocks[-1].drop_path.drop_prob == pytest.approx(ref["config"]["drop_path_rate"])
    assert count_params(model) == ref["params"]
    assert counter.get_total_flops() // 2 == ref["macs"]


@pytest.mark.slow
def test_macs_are_the_librarys_count() -> None:
    """The bench's own counter (inference form, real tensors) gives the recorded MACs."""
    assert (
        count_macs(timm.create_model("hcnet_micro", dims=(64, 128, 320, 512), depths=(2, 2, 6, 2)), 224)
        == (PARAMS["models"]["hcnet_authors_default"]["macs"])
    )


def test_tiny_is_near_the_papers_figures() -> None:
    ref = PARAMS["models"]["hcnet_tiny"]
    assert abs(ref["params"] / 28e6 - 1) < 0.015 and abs(ref["macs"] / 4.1e9 - 1) < 0.015


def _micro_from(path: Path, **kwargs: object) -> torch.nn.Module:
    cfg = torch.load(MICRO, weights_only=True)["config"]
    args = dict(dims=tuple(cfg["embed_dim"]), depths=tuple(cfg["depths"]), num_classes=cfg["num_classes"])
    args.update(kwargs)
    overlay = dict(file=str(path), num_classes=cfg["num_classes"])
    return timm.create_model("hcnet_micro", pretrained=True, pretrained_cfg_overlay=overlay, **args).eval()


@pytest.mark.parametrize("size", [64, 96])
def test_micro_logits_equal_the_authors(size: int) -> None:
    """Their checkpoint (with their ``mean_num`` buffers) through ``timm.create_model(..., pretrained=True)``."""
    ref = torch.load(MICRO, weights_only=True)
    model = _micro_from(MICRO)
    x = seeded_input((2, 3, size, size), ref["input_seed"] + size)
    with torch.no_grad():
        assert relative_error(model(x), ref[f"logits_{size}"]) < 1e-5
        assert relative_error(model.double()(x.double()), ref[f"logits_f64_{size}"]) < 1e-12


@pytest.mark.parametrize("wrapper", ["model", "model_ema", "state_dict", None])
def test_wrapped_and_raw_state_dicts_load(tmp_path: Path, wrapper: str | None) -> None:
    ref = torch.load(MICRO, weights_only=True)
    state = {f"module.{k}": v for k, v in ref["model"].items()} if wrapper == "state_dict" else ref["model"]
    path = tmp_path / "ckpt.pth"
    torch.save({wrapper: state, "epoch": 3} if wrapper else state, path)
    x = seeded_input((2, 3, 64, 64), ref["input_seed"] + 64)
    with torch.no_grad():
        assert relative_error(_micro_from(path)(x), ref["logits_64"]) < 1e-5


def test_filter_maps_every_key_and_drops_only_the_neighbour_counts() -> None:
    ref = torch.load(MICRO, weights_only=True)["model"]
    model = _micro_from(MICRO)
    converted = checkpoint_filter_fn(ref, model)
    assert set(converted) == set(model.state_dict())
    assert len(ref) - len(converted) == sum(k.endswith("mean_num") for k in ref) == 5
    assert checkpoint_filter_fn(model.state_dict(), model).keys() == model.state_dict().keys()  # ours unchanged


def _full_logits(name: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    full = torch.load(FIXTURES / "hcnet_ref_full.pth", weights_only=True)
    ref = full["models"][name]
    model = timm.create_model(name).eval()
    state = checkpoint_filter_fn(seeded_state(ref["shapes"], full["state_seed"]), model)
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model(seeded_input((1, 3, size, size), full["input_seed"])), ref[f"logits_{size}"]


@pytest.mark.parametrize("size", [224, 160])
def test_authors_default_logits_equal_theirs(size: int) -> None:
    out, ref = _full_logits("hcnet_authors_default", size)
    assert relative_error(out, ref) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("size", [224, 160])
def test_authors_main_logits_equal_theirs(size: int) -> None:
    out, ref = _full_logits("hcnet_authors_main", size)
    assert relative_error(out, ref) < 1e-5


def test_initialisation_follows_the_authors() -> None:
    """trunc_normal(0.02) and zero biases for the blocks' convolutions and the head, PyTorch's default for the stem and
    downsampling convolutions, norms at 1 / 0: each tensor's std and mean against their model's at seed 0."""
    torch.manual_seed(0)
    model = timm.create_model("hcnet_authors_default")
    ours = model.state_dict()
    stats = PARAMS["init_std_mean"]
    names = checkpoint_filter_fn({k: torch.zeros(1) for k in stats}, model)  # their names -> ours, in order
    assert len(names) == len(stats)
    for (key, (std, mean)), mapped in zip(stats.items(), names, strict=True):
        t = ours[mapped].float()
        if std == 0.0:
            assert torch.all(t == mean), key  # constant: norm weights 1, biases 0
        elif t.numel() >= 2000:
            assert t.std().item() == pytest.approx(std, rel=0.1), key
            assert abs(t.mean().item() - mean) < 0.1 * std, key
