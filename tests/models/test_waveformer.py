"""WaveFormer: equality with the authors' code (parameter counts, logits), checkpoints, folding, any input size,
gradients and ONNX export. (bf16 autocast, bad input, features, grad checkpointing, FX and timm's contract:
``waveformer_micro`` in the family-wide tests, test_common_api.py, test_timm_contract*.py, test_feature_*.py.)

The fixtures were produced by running the authors' implementation (see tests/fixtures/README.md).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import timm
import torch
from timm.utils.model import reparameterize_model

import pdevision  # noqa: F401
from pdevision.cli import main
from pdevision.layers import WavePropagationOperator
from pdevision.models import WaveFormer, list_models
from tests.helpers import FIXTURES, relative_error


@pytest.fixture(scope="module")
def micro() -> WaveFormer:
    torch.manual_seed(0)
    return timm.create_model("waveformer_micro", num_classes=7).eval()


def test_registered_in_timm_without_weights() -> None:
    sizes = ("micro", "tiny", "small", "base")
    assert set(timm.list_models("waveformer_*")) == {f"waveformer_{s}" for s in sizes}
    assert set(timm.list_models("waveformer_*", include_tags=True)) == {f"waveformer_{s}.untrained" for s in sizes}
    assert not timm.list_models("waveformer_*", pretrained=True)
    notes = " ".join(timm.models.get_pretrained_cfg("waveformer_tiny.untrained").notes)
    assert "not published in the authors' repository" in notes and "vHeat's released layout" in notes


# vHeat's released layouts (models/vheat.py): dims, depths, post-norm, layer scale, drop path
LAYOUTS = {
    "waveformer_tiny": (96, [2, 2, 6, 2], False, None, 0.1),
    "waveformer_small": (96, [2, 2, 18, 2], True, 1e-5, 0.3),
    "waveformer_base": (128, [2, 2, 18, 2], True, 1e-5, 0.5),
    "class_default": (96, [2, 2, 9, 2], True, None, 0.2),  # the authors' WaveFormer() defaults
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_parameter_counts_equal_authors_code_and_layouts(name: str) -> None:
    ref = json.loads((FIXTURES / "waveformer_ref_params.json").read_text())
    model = WaveFormer() if name == "class_default" else timm.create_model(name)
    assert sum(p.numel() for p in model.parameters()) == ref["models"][name]["params"]
    dim, depths, post_norm, layer_scale, drop_path = LAYOUTS[name]
    assert model.dims[0] == dim and model.depths == depths
    block = model.stages[2].blocks[-1]
    assert block.post_norm is post_norm and isinstance(block.mixer, WavePropagationOperator)
    assert isinstance(block.mixer.to_k[1], torch.nn.GELU)
    if layer_scale is None:
        assert isinstance(block.ls1, torch.nn.Identity)
    else:
        assert torch.allclose(block.ls1.gamma, torch.full_like(block.ls1.gamma, layer_scale))
    assert model.stages[-1].blocks[-1].drop_path1.drop_prob == pytest.approx(drop_path)
    assert model.stages[0].freq_embed.shape == (56, 56, dim)


def test_authors_initial_values() -> None:
    torch.manual_seed(0)
    model = WaveFormer(dims=16, depths=(1, 1, 1, 1), img_size=224)
    mixer = model.stages[0].blocks[0].mixer
    assert mixer.c.shape == mixer.alpha.shape == (1,)
    assert mixer.c.item() == 1.0 and mixer.alpha.item() == pytest.approx(0.1)
    fve = model.stages[0].freq_embed  # truncated normal, std 0.015, cut at +-2 (absolute, timm's trunc_normal_)
    assert fve.std().item() == pytest.approx(0.015, rel=0.05)
    with pytest.raises(TypeError, match="takes no k_mode"):
        WaveFormer(k_mode="fixed")


def _create_from(path: Path, **kwargs: object) -> WaveFormer:
    cfg = torch.load(FIXTURES / "waveformer_ref_prenorm.pth", weights_only=True)["config"]
    post_norm = "postnorm" in path.name
    args = dict(
        img_size=cfg["img_size"],
        dims=cfg["dims"],
        depths=tuple(cfg["depths"]),
        post_norm=post_norm,
        layer_scale=1e-5 if post_norm else None,
        num_classes=cfg["num_classes"],
    )
    args.update(kwargs)
    return timm.create_model(
        "waveformer_micro", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **args
    ).eval()


@pytest.mark.parametrize("name", ["prenorm", "postnorm_ls"])
def test_logits_equal_authors_code(name: str) -> None:
    path = FIXTURES / f"waveformer_ref_{name}.pth"
    ref = torch.load(path, weights_only=True)
    model = _create_from(path)
    with torch.no_grad():
        assert relative_error(model(ref["input"]), ref["logits"]) < 1e-4
        assert relative_error(model.double()(ref["input"].double()), ref["logits_f64"]) < 1e-10


@pytest.mark.parametrize("wrapper", ["model", "model_ema", "state_dict", None])
def test_wrapped_and_raw_state_dicts_load(tmp_path: Path, wrapper: str | None) -> None:
    ref = torch.load(FIXTURES / "waveformer_ref_postnorm_ls.pth", weights_only=True)
    state = {f"module.{k}": v for k, v in ref["model"].items()} if wrapper == "state_dict" else ref["model"]
    path = tmp_path / "postnorm_ls.pth"
    torch.save({wrapper: state, "epoch": 3} if wrapper else state, path)
    with torch.no_grad():
        out = _create_from(path)(ref["input"])
    assert relative_error(out, ref["logits"]) < 1e-4


def test_authors_inference_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    """The authors' infer_init layout: k_exp (their heat form) in place of freq_embed and op.to_k."""
    ref = torch.load(FIXTURES / "waveformer_ref_prenorm.pth", weights_only=True)
    state = {k: v for k, v in ref["model"].items() if not k.startswith("freq_embed.") and ".op.to_k." not in k}
    for key in [k for k in ref["model"] if k.endswith(".op.dwconv.weight")]:
        stage = int(key.split(".")[1])
        res = 16 // 2**stage
        state[key.replace("dwconv.weight", "k_exp")] = torch.rand(res, res, 8 * 2**stage)
    path = tmp_path / "infer.pth"
    torch.save({"model": state}, path)
    with pytest.raises(ValueError) as info:
        _create_from(path)
    message = str(info.value)
    assert "\n" not in message and "infer_init" in message and "load the training checkpoint" in message


def test_own_folded_checkpoint_loads(tmp_path: Path) -> None:
    ref = torch.load(FIXTURES / "waveformer_ref_prenorm.pth", weights_only=True)
    model = _create_from(FIXTURES / "waveformer_ref_prenorm.pth")
    model.reparameterize()
    state = model.state_dict()
    assert any(k.endswith("mixer.k_exp") for k in state)
    torch.save(state, tmp_path / "folded.pth")
    loaded = _create_from(tmp_path / "folded.pth")
    assert [s.folded_size() for s in loaded.stages] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    with torch.no_grad():
        assert relative_error(loaded(ref["input"]), ref["logits"]) < 1e-4


def test_folding_gives_the_same_logits() -> None:
    path = FIXTURES / "waveformer_ref_postnorm_ls.pth"
    ref = torch.load(path, weights_only=True)
    own, via_timm = _create_from(path), reparameterize_model(_create_from(path))
    own.reparameterize()
    assert all(s.folded_size() == (16 // 2**i,) * 2 for i, s in enumerate(own.stages))
    with torch.inference_mode():
        a, b = own(ref["input"]), via_timm(ref["input"])
    assert torch.equal(a, b)
    assert relative_error(a, ref["logits"]) < 1e-4


@pytest.mark.parametrize("size", [(45, 67), (97, 33)])
def test_odd_non_square_inputs(micro: WaveFormer, size: tuple[int, int]) -> None:
    with torch.no_grad():
        out = micro(torch.randn(2, 3, *size))
    assert out.shape == (2, 7) and torch.isfinite(out).all()


def test_gradients_reach_wave_parameters_and_fve() -> None:
    torch.manual_seed(0)
    model = timm.create_model("waveformer_micro", num_classes=4)
    model(torch.randn(2, 3, 64, 64)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    mixer = model.stages[1].blocks[0].mixer
    assert mixer.c.grad.abs().item() > 0 and mixer.alpha.grad.abs().item() > 0
    assert model.stages[1].freq_embed.grad.abs().sum() > 0


@pytest.mark.slow  # 10 s on the loaded 2-core machine; vHeat's legacy export of the same graph is in the fast suite
def test_onnx_export_with_dynamic_height_width(tmp_path: Path, micro: WaveFormer) -> None:
    path = tmp_path / "waveformer.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's tracer warnings
        axes = {"x": {0: "batch", 2: "height", 3: "width"}}
        torch.onnx.export(
            micro, (torch.randn(2, 3, 64, 64),), str(path), dynamo=False, input_names=["x"], dynamic_axes=axes
        )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in [(96, 80), (45, 67)]:
        x = torch.randn(1, 3, *size)
        (out,) = session.run(None, {"x": x.numpy()})
        with torch.no_grad():
            ref = micro(x).numpy()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"size {size}")


def test_cli_lists_the_models(capsys: pytest.CaptureFixture) -> None:
    """``pdevision models 'waveformer*'`` lists these (from the library's family list); the table for the micro only,
    as the GMACs of the large ones take half a minute to count."""
    assert list_models("waveformer*") == [f"waveformer_{s}" for s in ("base", "micro", "small", "tiny")]
    assert main(["models", "waveformer_mi*"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| waveformer_")]
    assert len(rows) == 1 and rows[0].startswith("| waveformer_micro | 2.12 |"), rows


@pytest.mark.slow  # 15-30 s on the loaded 2-core machine
def test_cli_trains_and_evaluates_one_epoch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    argv = ["train", "--model", "waveformer_micro", "--epochs", "1", "--output", str(out)]
    assert main([*argv, "--img-size", "32", "--batch-size", "32", "--max-train-batches", "2", "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["model"] == "waveformer_micro"
    assert main(["eval", "--checkpoint", str(out / "best")]) == 0
    assert "waveformer_micro on 360 images: top-1" in capsys.readouterr().out
