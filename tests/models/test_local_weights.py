"""Local weights through timm's pretrained_cfg_overlay keep a trained head (the example of docs/using.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import pdevision  # noqa: F401


@pytest.mark.parametrize(
    ("name", "suffix"),
    [("vheat_micro", ".pth"), ("hcnet_micro", ".pth"), ("pderesnet_micro", ".pth"), ("hcnet_micro", ".safetensors")],
)
def test_round_trip_keeps_the_trained_head(name: str, suffix: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5).eval()
    path = tmp_path / f"weights{suffix}"
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(state, path) if suffix == ".pth" else save_file(state, str(path))
    restored = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), num_classes=5)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(restored.eval()(x), model(x), rtol=0, atol=0)


def test_another_label_set_still_gets_a_fresh_head(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("hcnet_micro", num_classes=5)
    path = tmp_path / "w.pth"
    torch.save(model.state_dict(), path)
    tuned = timm.create_model(
        "hcnet_micro", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), num_classes=3
    )
    assert tuned.get_classifier().out_features == 3
    torch.testing.assert_close(tuned.stem.conv1.weight, model.stem.conv1.weight)


def test_save_for_hf_and_local_dir_round_trip(tmp_path: Path) -> None:
    """timm's own format: save_for_hf writes config.json + weights; "local-dir:" rebuilds the model with its head."""
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("vheat_micro", num_classes=5).eval()
    save_for_hf(model, str(tmp_path / "vheat_micro_5"))
    restored = timm.create_model(f"local-dir:{tmp_path / 'vheat_micro_5'}", pretrained=True).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(restored(x), model(x), rtol=0, atol=0)


def test_a_local_file_that_is_not_weights_is_one_clear_error(tmp_path: Path) -> None:
    model = timm.create_model("vheat_micro", num_classes=5)
    torch.save(model.state_dict(), tmp_path / "good.pth")
    save_file(model.state_dict(), str(tmp_path / "good.safetensors"))
    good_pth, good_st = (tmp_path / "good.pth").read_bytes(), (tmp_path / "good.safetensors").read_bytes()
    (tmp_path / "empty.pth").write_bytes(b"")
    (tmp_path / "truncated.pth").write_bytes(good_pth[: len(good_pth) // 2])
    (tmp_path / "truncated.safetensors").write_bytes(good_st[: len(good_st) // 2])
    torch.save([1, 2, 3], tmp_path / "list.pth")
    (tmp_path / "folder.pth").mkdir()
    cases = [  # timm's loader raised these with an empty message, an unnamed file or an AttributeError
        ("missing.pth", FileNotFoundError, "missing.pth not found"),
        ("folder.pth", ValueError, r"folder.pth is a folder, not a regular file; a weights file is expected"),
        ("empty.pth", ValueError, "empty.pth is empty"),
        ("truncated.pth", ValueError, "truncated.pth cannot be read as weights"),
        ("truncated.safetensors", ValueError, "truncated.safetensors cannot be read as weights"),
        ("list.pth", ValueError, "list.pth cannot be read as weights.*holds a list, not a state dict"),
    ]
    for name, error, match in cases:
        with pytest.raises(error, match=match):
            timm.create_model("vheat_micro", pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / name)))
    # the legacy (non-zip) format still loads, its 5-class head kept
    torch.save(model.state_dict(), tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    legacy = timm.create_model(
        "vheat_micro", pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "legacy.pth"))
    )
    assert legacy.num_classes == 5
