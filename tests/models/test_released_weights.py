"""Released weights by name: the registry equals the authors' published list, and the loading path (timm's cache,
the authors' layout through the filter, smp's ``encoder_weights``) works on local files. Nothing is downloaded: a
file placed in timm's cache under the release's file name is what ``pretrained=True`` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import segmentation_models_pytorch as smp
import timm
import torch

import pdevision
from pdevision.models import FAMILIES, list_models

FIXTURES = Path(__file__).parents[1] / "fixtures"
PUBLISHED = json.loads((FIXTURES / "released_weights.json").read_text())
REF = FIXTURES / "vheat_ref_prenorm.pth"


def _ours(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.split("_")[0].split(".")[0] in FAMILIES or n.startswith("pderesnet"))


def test_pretrained_tags_equal_the_published_list() -> None:
    assert _ours(timm.list_pretrained()) == sorted(PUBLISHED["registered"])
    assert timm.list_pretrained("vheat*") == sorted(PUBLISHED["registered"])
    for tag, entry in PUBLISHED["registered"].items():
        cfg = timm.get_pretrained_cfg(tag)
        assert cfg.url == entry["url"] and cfg.hf_hub_id is None
        assert cfg.origin_url == "https://github.com/MzeroMiko/vHeat"


def test_no_tag_promises_weights_that_do_not_exist() -> None:
    for name in list_models():
        for tag in timm.list_models(name, include_tags=True):
            cfg = timm.get_pretrained_cfg(tag)
            if tag not in PUBLISHED["registered"]:
                assert tag.endswith(".untrained"), tag
                assert not (cfg.url or cfg.hf_hub_id or cfg.file), tag
    for family in PUBLISHED["no_released_weights"]:
        assert not timm.list_pretrained(f"{family}*")
    with pytest.raises(RuntimeError, match="No pretrained weights exist"):
        timm.create_model("waveformer_micro", pretrained=True)


def _micro_args() -> dict[str, object]:
    cfg = torch.load(REF, weights_only=True)["config"]
    return dict(img_size=cfg["img_size"], dims=cfg["dims"], depths=tuple(cfg["depths"]), post_norm=False)


def test_authors_layout_file_loads_through_the_tag_with_a_file_overlay() -> None:
    ref = torch.load(REF, weights_only=True)
    model = timm.create_model(
        "vheat_tiny.in1k", pretrained=True, pretrained_cfg_overlay=dict(file=str(REF)), **_micro_args()
    ).eval()
    assert model.num_classes == ref["logits"].shape[1]  # the file's head kept
    with torch.no_grad():
        torch.testing.assert_close(model(ref["input"]), ref["logits"], rtol=1e-4, atol=1e-4)


@pytest.fixture
def cached_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """timm's (torch hub's) cache in ``tmp_path`` holding an authors'-layout file under the release's file name."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    checkpoints = tmp_path / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    ref = torch.load(REF, weights_only=True)
    torch.save({"model": ref["model"]}, checkpoints / "vHeat_tiny.pth")  # the authors' training-code layout
    return checkpoints


def _reference_model() -> torch.nn.Module:
    """The micro model with the fixture's weights, converted by the filter directly (no timm loading path)."""
    ref = torch.load(REF, weights_only=True)
    model = timm.create_model("vheat_tiny", num_classes=ref["logits"].shape[1], **_micro_args())
    model.load_state_dict(pdevision.models.checkpoint_filter_fn(ref["model"], model))
    return model.eval()


def test_pretrained_true_reads_the_release_from_the_cache(cached_release: Path) -> None:
    ref = torch.load(REF, weights_only=True)
    expected = _reference_model()
    # num_classes differs from the release's 1000: timm keeps the backbone and gives a fresh head
    model = timm.create_model("vheat_tiny", pretrained=True, num_classes=3, **_micro_args()).eval()
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(ref["input"]), expected.forward_features(ref["input"]))
    assert model.get_classifier().out_features == 3
    assert sorted(p.name for p in cached_release.iterdir()) == ["vHeat_tiny.pth"]  # nothing else fetched


def test_smp_encoder_weights_load_the_release(cached_release: Path) -> None:
    ref = torch.load(REF, weights_only=True)
    unet = smp.Unet(
        "tu-vheat_tiny",
        encoder_weights=True,
        encoder_depth=4,
        decoder_channels=(32, 16, 8, 8),
        classes=2,
        **_micro_args(),
    ).eval()
    expected = _reference_model()
    with torch.no_grad():
        features = unet.encoder.model(ref["input"])
        reference = expected.forward_intermediates(ref["input"], intermediates_only=True)
        assert len(features) == 3  # encoder_depth 4: the first three stages
        for ours, theirs in zip(features, reference[:3], strict=True):
            torch.testing.assert_close(ours, theirs)
        assert unet(torch.randn(1, 3, 64, 64)).shape == (1, 2, 64, 64)


def test_train_pretrained_path_loads_the_release_into_a_built_model(cached_release: Path) -> None:
    """``pdevision train --pretrained``'s loader: the release into a model the task built (here with 3 classes)."""
    from pdevision.engine.modeling import create_model, load_released, released_tag

    ref = torch.load(REF, weights_only=True)
    model = create_model("vheat_tiny", num_classes=3, **_micro_args()).eval()
    assert load_released(model, "vheat_tiny") == "vheat_tiny.in1k" == released_tag("vheat_tiny")
    with torch.no_grad():
        torch.testing.assert_close(
            model.forward_features(ref["input"]), _reference_model().forward_features(ref["input"])
        )
    with pytest.raises(ValueError, match="hcnet_micro has no released weights"):
        released_tag("hcnet_micro")
