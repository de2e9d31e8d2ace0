"""engine.modeling: the one checkpoint-to-model path and the classifier loader built on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pdevision.viz.common
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import create_model, load_classifier
from pdevision.engine.save import save_checkpoint
from pdevision.fastpath import is_accelerated


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    """A run folder with an untrained hcnet_micro classifier of three classes at 32 px, and the model saved."""
    out = tmp_path_factory.mktemp("modeling") / "run"
    model = create_model("hcnet_micro", num_classes=3, img_size=32).eval()
    meta = {"model": "hcnet_micro", "classes": ["a", "b", "c"], "img_size": 32, "model_args": {"img_size": 32}}
    save_checkpoint(out, "best", model, meta)
    return out, model


def test_load_classifier_gives_the_saved_model_plain_or_on_the_kernels(classifier) -> None:
    run, saved = classifier
    plain, meta, folder = load_classifier(run)
    fast, _, _ = load_classifier(run, "cpu", fused_kernels=True)
    assert folder == run / "best" and meta["classes"] == ["a", "b", "c"]
    assert not plain.training and not fast.training
    assert not is_accelerated(plain) and is_accelerated(fast)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(plain(x), saved(x), rtol=0, atol=0)
        torch.testing.assert_close(fast(x), saved(x), rtol=1e-5, atol=1e-5)


def test_load_classifier_refuses_another_kind(tmp_path: Path) -> None:
    model = create_model("hcnet_micro", num_classes=0, img_size=32)
    save_checkpoint(tmp_path, "best", model, {"model": "hcnet_micro", "kind": "encoder", "img_size": 32})
    with pytest.raises(CheckpointError, match=r"is a encoder checkpoint .*this takes classify checkpoints"):
        load_classifier(tmp_path)


def test_the_figures_have_no_loader_of_their_own() -> None:
    """One checkpoint-to-model path: viz used to define a second ``load_checkpoint_model`` with another signature."""
    assert not hasattr(pdevision.viz.common, "load_checkpoint_model")
