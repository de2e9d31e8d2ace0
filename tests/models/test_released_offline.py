"""``timm.create_model("vheat_tiny", pretrained=True)`` with ``HF_HUB_OFFLINE=1`` and an empty cache: one clear
error, the command line's words, and no download attempt (issue 55: a 68-line traceback that ignored the setting)."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import timm.models._builder

import pdevision  # noqa: F401  (registers the models)
from pdevision.models._weights import ReleasedWeightsUnavailableError


def test_offline_released_weights_are_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # timm's cache: empty
    tried: list[str] = []
    monkeypatch.setattr(timm.models._builder, "load_state_dict_from_url", lambda url, **kw: tried.append(url))
    with pytest.raises(ReleasedWeightsUnavailableError) as info:
        timm.create_model("vheat_tiny", pretrained=True)
    message = str(info.value)
    file = tmp_path / "hub" / "checkpoints" / "vHeat_tiny.pth"
    assert isinstance(info.value, RuntimeError) and "\n" not in message and tried == []
    assert message.startswith(f"vheat_tiny.in1k: HF_HUB_OFFLINE is set and {file} is not in timm's cache; ")
    assert "without a network, put the file https://github.com/MzeroMiko/vHeat/" in message
    # online (no HF_HUB_OFFLINE) timm is asked for the file as before
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(TypeError):  # the stand-in "download" above returned no state dict: timm did try
        timm.create_model("vheat_tiny", pretrained=True)
    assert len(tried) == 1
